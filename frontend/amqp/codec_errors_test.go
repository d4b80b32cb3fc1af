package amqp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Decoding hostile or broken input: truncation, bad codes, oversized
// claims, nesting. Nothing may panic or allocate what the peer merely claims.

// validEncodings are valid encodings used by the negative tests.
func validEncodings(t testing.TB) [][]byte {
	var out [][]byte
	for _, v := range []any{
		uint64(math.MaxUint64), int32(-200), math.Pi, testUUID, ms(1795237283242), Char('x'),
		"hello", Symbol("sym"), []byte{1, 2, 3},
		[]any{uint8(1), "two", Map{{Symbol("k"), []any{nil}}}, []Symbol{"a", "bc"}},
		Map{{"k", Described{uint64(0x24), []any{}}}, {[]byte{9}, Array{Constructor: codeBool, Elems: []any{true}}}},
		Described{Symbol("amqp:data:binary"), []byte("x")},
		[]int64{1, 2}, []UUID{testUUID}, nulls(300),
	} {
		out = append(out, mustEncode(t, v))
	}
	for _, h := range []string{
		"c0 04 02 50 01 41", "c1 09 04 a3 01 61 41 a1 01 62 40",
		"e0 07 02 a3 02 61 62 01 63", "e0 09 02 00 53 77 a1 01 61 01 62",
		"e0 08 02 c0 01 00 03 01 50 07", "00 80 00 00 46 8c 00 00 00 04 a1 03 78 3d 31",
	} {
		out = append(out, unhex(h))
	}
	return out
}

func nulls(n int) []any { return make([]any, n) }

// TestDecodeTruncated: every proper prefix of a valid encoding is an error
// that wraps errDecode, never a panic or a success.
func TestDecodeTruncated(t *testing.T) {
	for _, enc := range validEncodings(t) {
		if _, err := decodeOne(enc); err != nil {
			t.Fatalf("valid encoding % x: %v", enc, err)
		}
		for n := range len(enc) {
			prefix := bytes.Clone(enc[:n])
			d := decoder{b: prefix[:n:n]}
			v, err := d.value()
			if err == nil {
				t.Fatalf("prefix %d of % x decoded to %#v", n, enc, v)
			}
			if !errors.Is(err, errDecode) {
				t.Fatalf("prefix %d of % x: error %v does not wrap errDecode", n, enc, err)
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ name, hex string }{
		// Sizes and counts larger than the data.
		{"vbin8 size", "a0 05 01 02"},
		{"vbin32 size", "b0 ff ff ff ff 00"},
		{"str8 size", "a1 03 61"},
		{"str32 size", "b1 7f ff ff ff 61"},
		{"sym8 size", "a3 02 61"},
		{"sym32 size", "b3 00 00 00 09"},
		{"list8 size", "c0 05 02 41"},
		{"list8 count", "c0 02 05 41"},
		{"list32 size", "d0 ff ff ff ff 00 00 00 01"},
		{"list32 count", "d0 00 00 00 04 ff ff ff ff"},
		{"map8 count", "c1 01 04"},
		{"map32 count", "d1 00 00 00 04 7f ff ff fe"},
		{"array8 count", "e0 02 ff 40"},
		{"array32 count", "f0 00 00 00 05 ff ff ff ff 40"},
		{"array32 size", "f0 00 01 00 00 00 00 00 01 50 01"},
		{"array element size", "e0 04 02 a1 05 61"},
		{"array fewer elements", "e0 04 03 50 01 02"},
		// Sizes too small for their own header.
		{"list8 size 0", "c0 00"},
		{"list32 size 3", "d0 00 00 00 03 00 00 00"},
		{"map8 size 0", "c1 00"},
		{"array8 size 1", "e0 01 00"},
		{"array32 size 4", "f0 00 00 00 04 00 00 00 00"},
		// Elements that do not fill, or overrun, their compound.
		{"list does not fill", "c0 03 01 41 41"},
		{"list element overruns", "c0 02 01 a1 01 61"},
		{"map does not fill", "c1 04 02 41 41 41"},
		{"array does not fill", "e0 04 01 50 01 02"},
		// Invalid UTF-8.
		{"str8 invalid utf-8", "a1 02 c3 28"},
		{"str32 invalid utf-8", "b1 00 00 00 01 ff"},
		{"str8 surrogate", "a1 03 ed a0 80"},
		{"invalid utf-8 in list", "c0 05 01 a1 02 c3 28"},
		{"invalid utf-8 in array", "e0 05 01 a1 02 c3 28"},
		// Bad values of fixed types.
		{"boolean 2", "56 02"},
		{"boolean ff", "56 ff"},
		{"boolean 2 in array", "e0 04 02 56 01 02"},
		{"char beyond unicode", "73 00 11 00 00"},
		// Structural problems.
		{"map odd count", "c1 02 01 40"},
		{"map32 odd count", "d1 00 00 00 07 00 00 00 03 40 40 40"},
		{"descriptor not ulong or symbol", "00 a1 01 78 40"},
		{"descriptor uint", "00 52 01 40"},
		{"doubly described array", "e0 06 01 00 53 01 00 40"},
		{"described without value", "00 53 01"},
		{"empty", ""},
	}
	// Invalid format codes.
	for _, c := range []byte{0x01, 0x02, 0x0f, 0x10, 0x30, 0x3f, 0x46, 0x4f, 0x57, 0x5f, 0x62, 0x6f,
		0x75, 0x7f, 0x85, 0x8f, 0x90, 0x95, 0x99, 0x9f, 0xa2, 0xa4, 0xaf, 0xb2, 0xb4, 0xc2, 0xcf,
		0xd2, 0xe1, 0xef, 0xf1, 0xff} {
		tests = append(tests, struct{ name, hex string }{"format code " + hex.EncodeToString([]byte{c}),
			hex.EncodeToString(append([]byte{c}, make([]byte, 20)...))})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := decodeOne(unhex(tc.hex))
			if err == nil {
				t.Fatalf("% x decoded to %#v", unhex(tc.hex), v)
			}
			if !errors.Is(err, errDecode) {
				t.Fatalf("error %v does not wrap errDecode", err)
			}
		})
	}
}

// TestDecodeHugeClaimsDoNotAllocate: a count the data cannot back is
// refused before anything is allocated for it.
func TestDecodeHugeClaimsDoNotAllocate(t *testing.T) {
	for _, h := range []string{
		"f0 00 00 00 05 ff ff ff ff 40", // array32 of 4G nulls in 5 bytes
		"f0 00 00 00 05 ff ff ff ff 43", // ... of uint0
		"f0 00 00 00 05 ff ff ff ff a3", // ... of symbols
		"d0 00 00 00 04 ff ff ff ff",    // list32 of 4G elements
		"d1 00 00 00 04 ff ff ff fe",    // map32 of 2G pairs
		"b0 ff ff ff ff",                // vbin32 of 4 GiB
	} {
		b := unhex(h)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			if _, err := decodeOne(b); !errors.Is(err, errDecode) {
				t.Fatalf("% x: %v", b, err)
			}
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
			t.Errorf("% x: 100 decodes allocated %d bytes", b, n)
		}
		if n := testing.AllocsPerRun(10, func() { _, _ = decodeOne(b) }); n > 20 {
			t.Errorf("% x: %v allocations per decode", b, n)
		}
	}
}

// nestedLists returns n lists nested in each other, innermost empty.
func nestedLists(n int) []byte {
	b := []byte{codeList0}
	for range n - 1 {
		inner := b
		b = []byte{codeList32, 0, 0, 0, 0, 0, 0, 0, 1}
		putU32(b[1:], uint32(4+len(inner)))
		b = append(b, inner...)
	}
	return b
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func nestedDescribed(n int) []byte {
	return append(bytes.Repeat([]byte{codeDescribed, codeSmallUlong, 1}, n), codeNull)
}

func nestedArrays(n int) []byte {
	// innermost: array8 of zero ubytes; each level wraps one array32 element.
	b := []byte{codeArray8, 2, 0, codeUbyte}
	for range n - 1 {
		inner := b[1:] // an element drops its constructor
		b = []byte{codeArray32, 0, 0, 0, 0, 0, 0, 0, 1, b[0]}
		putU32(b[1:], uint32(5+len(inner)))
		b = append(b, inner...)
	}
	return b
}

func TestDecodeNesting(t *testing.T) {
	for name, build := range map[string]func(int) []byte{
		"lists": nestedLists, "described": nestedDescribed, "arrays": nestedArrays,
	} {
		if _, err := decodeOne(build(maxNesting)); err != nil {
			t.Errorf("%s nested %d deep: %v", name, maxNesting, err)
		}
		if _, err := decodeOne(build(maxNesting + 1)); !errors.Is(err, errDecode) {
			t.Errorf("%s nested %d deep: %v, want a decode error", name, maxNesting+1, err)
		}
	}
	// Very deep input fails fast instead of exhausting the stack.
	start := time.Now()
	if _, err := decodeOne(nestedDescribed(1 << 20)); !errors.Is(err, errDecode) {
		t.Errorf("1M nested described values: %v", err)
	}
	deep := bytes.Repeat([]byte{codeList8, 0xff, 1}, 1<<16) // sizes are wrong too; depth or size fails first
	if _, err := decodeOne(deep); !errors.Is(err, errDecode) {
		t.Errorf("64K nested lists: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("deep inputs took %v", d)
	}
	// skip (unknown trailing fields, and the sections a broker stores
	// undecoded) has the same bound.
	for name, build := range map[string]func(int) []byte{
		"lists": nestedLists, "described": nestedDescribed, "arrays": nestedArrays, "maps": nestedMaps,
	} {
		d := decoder{b: build(maxNesting + 1)}
		if err := d.skip(); !errors.Is(err, errDecode) {
			t.Errorf("skip of %s nested %d deep: %v", name, maxNesting+1, err)
		}
		d = decoder{b: build(maxNesting)}
		if err := d.skip(); err != nil || d.remaining() != 0 {
			t.Errorf("skip of %s nested %d deep: %v, %d left", name, maxNesting, err, d.remaining())
		}
	}
}

func nestedMaps(n int) []byte {
	// innermost: an empty map; each level maps null to the one inside.
	b := []byte{codeMap8, 1, 0}
	for range n - 1 {
		inner := b
		b = []byte{codeMap32, 0, 0, 0, 0, 0, 0, 0, 2, codeNull}
		putU32(b[1:], uint32(5+len(inner)))
		b = append(b, inner...)
	}
	return b
}

// TestSectionsNesting: the sections a broker keeps without decoding them
// (application-properties, bodies, footer) are held to the nesting bound
// of the sections it decodes: 7,000 nested lists are a decode error.
func TestSectionsNesting(t *testing.T) {
	props := appendDescriptor(nil, SectionProperties)
	props = append(props, codeList0)
	for _, tc := range []struct {
		name string
		desc uint64
		wrap func(v []byte) []byte // the section's value holding v
	}{
		{"application-properties", SectionApplicationProperties, func(v []byte) []byte {
			m := []byte{codeMap32, 0, 0, 0, 0, 0, 0, 0, 2, codeStr8, 1, 'k'}
			putU32(m[1:], uint32(4+3+len(v)))
			return append(m, v...)
		}},
		{"amqp-value", SectionAMQPValue, func(v []byte) []byte { return v }},
		{"amqp-sequence", SectionAMQPSequence, func(v []byte) []byte {
			l := []byte{codeList32, 0, 0, 0, 0, 0, 0, 0, 1}
			putU32(l[1:], uint32(4+len(v)))
			return append(l, v...)
		}},
		{"footer", SectionFooter, func(v []byte) []byte {
			m := []byte{codeMap32, 0, 0, 0, 0, 0, 0, 0, 2, codeSym8, 1, 'k'}
			putU32(m[1:], uint32(4+3+len(v)))
			return append(m, v...)
		}},
	} {
		for _, depth := range []int{7000, maxNesting} {
			msg := append(bytes.Clone(props), appendDescriptor(nil, tc.desc)...)
			msg = append(msg, tc.wrap(nestedLists(depth))...)
			_, err := Sections(msg, nil)
			if depth > maxNesting {
				if !errors.Is(err, errDecode) || !strings.Contains(err.Error(), "nested deeper") {
					t.Errorf("%s holding %d nested lists: Sections gave %v, want the nesting error", tc.name, depth, err)
				}
				continue
			}
			// The section's own map or list is a level too.
			if tc.name != "amqp-value" {
				if !errors.Is(err, errDecode) {
					t.Errorf("%s holding %d nested lists in its map: Sections gave %v, want the nesting error", tc.name, depth, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s holding %d nested lists: %v", tc.name, depth, err)
			}
			var m Message
			if err := m.Decode(msg); err != nil {
				t.Errorf("%s holding %d nested lists: Sections accepts it, Decode gives %v", tc.name, depth, err)
			}
		}
	}
}

// TestSkip: skip consumes exactly one value of every kind.
func TestSkip(t *testing.T) {
	for _, enc := range validEncodings(t) {
		b := append(bytes.Clone(enc), codeTrue)
		d := decoder{b: b}
		if err := d.skip(); err != nil {
			t.Errorf("skip % x: %v", enc, err)
			continue
		}
		if d.off != len(enc) {
			t.Errorf("skip % x consumed %d bytes, want %d", enc, d.off, len(enc))
		}
	}
	for _, h := range []string{"", "57", "a1 05 61", "00 53", "f0 00 00", "90 00"} {
		d := decoder{b: unhex(h)}
		if err := d.skip(); !errors.Is(err, errDecode) {
			t.Errorf("skip % x: %v, want a decode error", unhex(h), err)
		}
	}
}

// TestTypedReaders checks the readers the composite decoders use: they
// accept the narrower encodings of their type and refuse other types.
func TestTypedReaders(t *testing.T) {
	ulong := map[string]uint64{"44": 0, "43": 0, "53 07": 7, "52 07": 7, "50 07": 7, "60 01 00": 256,
		"70 00 01 00 00": 65536, "80 00 00 00 01 00 00 00 00": 1 << 32}
	for h, want := range ulong {
		d := decoder{b: unhex(h)}
		if got, err := d.readUlong(); err != nil || got != want || d.remaining() != 0 {
			t.Errorf("readUlong(% s) = %d, %v", h, got, err)
		}
	}
	for _, h := range []string{"55 01", "a1 00", "40", "80 00"} {
		d := decoder{b: unhex(h)}
		if _, err := d.readUlong(); !errors.Is(err, errDecode) {
			t.Errorf("readUlong(%s): %v", h, err)
		}
	}
	uint32s := map[string]uint32{"43": 0, "52 07": 7, "50 07": 7, "60 01 00": 256, "70 ff ff ff ff": math.MaxUint32}
	for h, want := range uint32s {
		d := decoder{b: unhex(h)}
		if got, err := d.readUint(); err != nil || got != want {
			t.Errorf("readUint(%s) = %d, %v", h, got, err)
		}
	}
	for _, h := range []string{"53 01", "44", "80 00 00 00 00 00 00 00 00", "54 01"} {
		d := decoder{b: unhex(h)}
		if _, err := d.readUint(); !errors.Is(err, errDecode) {
			t.Errorf("readUint(%s): %v", h, err)
		}
	}
	longs := map[string]int64{"55 ff": -1, "54 ff": -1, "51 ff": -1, "61 ff 00": -256, "71 ff ff ff 00": -256,
		"81 80 00 00 00 00 00 00 00": math.MinInt64}
	for h, want := range longs {
		d := decoder{b: unhex(h)}
		if got, err := d.readLong(); err != nil || got != want {
			t.Errorf("readLong(%s) = %d, %v", h, got, err)
		}
	}
	bools := map[string]bool{"41": true, "42": false, "56 01": true, "56 00": false}
	for h, want := range bools {
		d := decoder{b: unhex(h)}
		if got, err := d.readBool(); err != nil || got != want {
			t.Errorf("readBool(%s) = %v, %v", h, got, err)
		}
	}
	for _, h := range []string{"56 02", "50 01", "40", ""} {
		d := decoder{b: unhex(h)}
		if _, err := d.readBool(); !errors.Is(err, errDecode) {
			t.Errorf("readBool(%s): %v", h, err)
		}
	}
	for h, want := range map[string][]Symbol{
		"a3 01 61": {"a"}, "b3 00 00 00 01 61": {"a"}, "40": nil,
		"e0 05 02 a3 00 01 62": {"", "b"}, "f0 00 00 00 05 00 00 00 00 b3": {},
	} {
		d := decoder{b: unhex(h)}
		if got, err := d.readSymbols(); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("readSymbols(%s) = %#v, %v", h, got, err)
		}
	}
	for _, h := range []string{"a1 01 61", "e0 03 01 a1 00", "45", "e0 06 01 00 53 01 a3 00"} {
		d := decoder{b: unhex(h)}
		if _, err := d.readSymbols(); !errors.Is(err, errDecode) {
			t.Errorf("readSymbols(%s): %v", h, err)
		}
	}
	for _, h := range []string{"45", "a1 00", "e0 02 00 a3"} {
		d := decoder{b: unhex(h)}
		if _, err := d.readMap(); !errors.Is(err, errDecode) {
			t.Errorf("readMap(%s): %v", h, err)
		}
	}
}

func TestMapGetSetDelete(t *testing.T) {
	var m Map
	if _, ok := m.Get("x"); ok {
		t.Fatal("Get on a nil Map found a key")
	}
	m.Set([]byte{1, 2}, "a")
	m.Set([]byte{1, 2}, "b") // same binary key: replaced
	m.Set([]byte{1}, "c")
	m.Set("k", int64(1))
	m.Set(Symbol("k"), int64(2)) // a symbol is not a string
	m.Set(uint32(7), nil)
	if len(m) != 5 {
		t.Fatalf("len = %d, want 5: %#v", len(m), m)
	}
	for _, tc := range []struct {
		key  any
		want any
	}{
		{[]byte{1, 2}, "b"}, {[]byte{1}, "c"}, {"k", int64(1)}, {Symbol("k"), int64(2)}, {uint32(7), nil},
	} {
		if got, ok := m.Get(tc.key); !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Get(%#v) = %#v, %v; want %#v", tc.key, got, ok, tc.want)
		}
	}
	for _, key := range []any{[]byte{}, []byte(nil), []byte{1, 2, 3}, "\x01\x02", uint64(7), nil, []any{1}, Map{}} {
		if v, ok := m.Get(key); ok {
			t.Errorf("Get(%#v) found %#v", key, v)
		}
	}
	// Uncomparable keys never match but do not panic.
	m.Set([]any{uint8(1)}, "list key")
	m.Set([]any{uint8(1)}, "again")
	if len(m) != 7 {
		t.Errorf("uncomparable keys: len = %d, want 7", len(m))
	}
	m.Delete([]byte{1, 2})
	m.Delete([]byte{9}) // absent: no-op
	want := []any{[]byte{1}, "k", Symbol("k"), uint32(7)}
	for i, k := range want {
		if !reflect.DeepEqual(m[i].Key, k) {
			t.Errorf("after Delete, key %d = %#v, want %#v (order kept)", i, m[i].Key, k)
		}
	}
	if _, ok := m.Get([]byte{1, 2}); ok {
		t.Error("deleted binary key still present")
	}
	// A decoded map with a binary key answers Get with an equal slice.
	v, err := decodeOne(mustEncode(t, Map{{[]byte{0, 0xff}, "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := v.(Map).Get([]byte{0, 0xff}); !ok || got != "x" {
		t.Errorf("decoded map Get = %#v, %v", got, ok)
	}
}

func TestUUIDString(t *testing.T) {
	if got, want := testUUID.String(), "12345678-9abc-def0-0123-456789abcdef"; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

func TestTypeName(t *testing.T) {
	for c := range 256 {
		if typeName(byte(c)) == "" {
			t.Errorf("typeName(0x%02x) is empty", c)
		}
	}
	if typeName(codeSmallUlong) != "ulong" || typeName(0x57) != "0x57" {
		t.Error("typeName")
	}
}
