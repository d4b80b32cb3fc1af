package cluster

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestParseGossipKeys(t *testing.T) {
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	k16 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 16))
	keys, err := ParseGossipKeys([]byte("# new first\n" + k32 + "\n\n  " + k16 + "  \n"))
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("keys %d, %v", len(keys), err)
	}
	for _, bad := range []string{"", "# only a comment\n", "not base64!\n", base64.StdEncoding.EncodeToString([]byte("short")), strings.Repeat(k32+"\n", 200)} {
		if _, err := ParseGossipKeys([]byte(bad)); err == nil {
			t.Errorf("%.40q parsed", bad)
		} else if strings.Contains(err.Error(), k32) {
			t.Errorf("the error shows a key: %v", err)
		}
	}
}

func FuzzParseGossipKeys(f *testing.F) {
	f.Add([]byte(base64.StdEncoding.EncodeToString(make([]byte, 32))))
	f.Add([]byte("# c\n\n" + base64.StdEncoding.EncodeToString(make([]byte, 24)) + "\nxx"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseGossipKeys(data)
		if err == nil && len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for _, k := range keys {
			if n := len(k); n != 16 && n != 24 && n != 32 {
				t.Fatalf("a key of %d bytes", n)
			}
		}
	})
}
