package store

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestKeySpaceDocumented holds the two descriptions of the key space to
// the constants: the table in doc.go and the one in docs/storage.md name
// exactly the prefixes and entity data kinds this package defines, so a
// kind added here without both tables (or a table row naming a kind that
// is gone) fails.
func TestKeySpaceDocumented(t *testing.T) {
	prefixes := []byte{PrefixMeta, PrefixEntity, PrefixEntData, PrefixRequest, PrefixReqTime, PrefixDeleted}
	kinds := []byte{
		KindMessage, KindAvailable, KindLock, KindScheduled, KindExpiry, KindDedup, KindDedupTime, KindBody,
		KindBlob, KindStaged, KindSession, KindSessionMsg, KindSessionHeld, KindSessionReady, KindSessionLock,
		KindSessionParked, KindForward, KindForwardTime, KindTopicSched, KindTopicSchedTime, KindBlobRefs, KindBlobUse,
	}
	want := keySpace(prefixes, kinds)

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// doc.go: "//	0x02 eid(8) part(4) 0x01 sub(1) seq(8)   message state..."
	var fromDoc []string
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "//\t0x"); ok {
			fromDoc = append(fromDoc, tableKey(t, "doc.go", strings.Fields("0x"+rest), "part(4)"))
		}
	}
	md, err := os.ReadFile("../../docs/storage.md")
	if err != nil {
		t.Fatal(err)
	}
	// docs/storage.md: "| `0x02 eid part 0x01 sub seq` | a message's state ... |"
	row := regexp.MustCompile("(?m)^\\| `(0x[^`]*)` \\|")
	var fromMD []string
	for _, m := range row.FindAllStringSubmatch(string(md), -1) {
		fromMD = append(fromMD, tableKey(t, "docs/storage.md", strings.Fields(m[1]), "part"))
	}
	for name, got := range map[string][]string{"doc.go": fromDoc, "docs/storage.md": fromMD} {
		got = slices.Compact(slices.Sorted(slices.Values(got)))
		if !slices.Equal(got, want) {
			t.Errorf("%s's key table names %v; the constants are %v", name, got, want)
		}
	}
}

// keySpace is what the tables must name: every prefix but the entity
// data's alone, and the entity data's with each kind.
func keySpace(prefixes, kinds []byte) []string {
	var out []string
	for _, p := range prefixes {
		if p != PrefixEntData {
			out = append(out, fmt.Sprintf("0x%02x", p))
		}
	}
	for _, k := range kinds {
		out = append(out, fmt.Sprintf("0x%02x 0x%02x", PrefixEntData, k))
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// tableKey reads a table row's key: its prefix, and for entity data the
// kind, the field after the partition's (named part).
func tableKey(t *testing.T, where string, fields []string, part string) string {
	t.Helper()
	if fields[0] != fmt.Sprintf("0x%02x", PrefixEntData) {
		return fields[0]
	}
	i := slices.Index(fields, part)
	if i < 0 || i+1 >= len(fields) || !strings.HasPrefix(fields[i+1], "0x") {
		t.Fatalf("%s: row %q has no kind after %q", where, strings.Join(fields, " "), part)
	}
	return fields[0] + " " + fields[i+1]
}
