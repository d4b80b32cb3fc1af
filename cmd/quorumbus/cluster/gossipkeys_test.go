package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestWatchGossipKeys: a changed file hands its keys over; a file that
// does not parse hands nothing and keeps what is in use.
func TestWatchGossipKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gossip.key")
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	if err := os.WriteFile(path, []byte(k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan [][]byte, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go WatchGossipKeys(ctx, path, 10*time.Millisecond, func(k [][]byte) error { got <- k; return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several rounds over the broken file
	select {
	case k := <-got:
		t.Fatalf("a file that does not parse handed over %d keys", len(k))
	default:
	}
	if err := os.WriteFile(path, []byte(k2+"\n"+k1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-got:
		if len(k) != 2 || k[0][0] != 2 || k[1][0] != 1 {
			t.Fatalf("keys %v", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the changed file was not handed over")
	}
}
