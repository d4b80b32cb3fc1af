package membership

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func startKeyed(t *testing.T, id string, keys [][]byte, seeds ...string) *Memberlist {
	t.Helper()
	m, err := New(Config{
		NodeID: id, Role: RoleStorage, GRPCAddr: id + ".grpc:7000",
		BindAddr: "127.0.0.1:0", Seeds: seeds, Network: "local", Keys: keys, Logger: quiet(),
		RejoinInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// key is a 32-byte (AES-256) key told apart by its last byte.
func key(b byte) []byte {
	k := make([]byte, 32)
	k[31] = b
	return k
}

// TestGossipKeys: members with the cluster's key see each other; one with
// another key, or with none, does not join, and is not seen, though it
// keeps trying its seeds; after a rotation (new key added everywhere, then
// made primary, then the old dropped) the members still see each other and
// a newcomer with only the new key joins.
func TestGossipKeys(t *testing.T) {
	k1, k2, other := key(1), key(2), key(3)
	a := startKeyed(t, "a", [][]byte{k1})
	b := startKeyed(t, "b", [][]byte{k1}, a.Addr())
	waitFor(t, "a and b", func() bool { return slices.Equal(ids(a.Members()), []string{"a", "b"}) })

	wrong := startKeyed(t, "wrong", [][]byte{other}, a.Addr())
	plain := startKeyed(t, "plain", nil, a.Addr())
	// Give them several rejoin rounds; none may get in either direction.
	time.Sleep(2 * time.Second)
	for _, m := range []*Memberlist{a, b} {
		if got := ids(m.Members()); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("%s sees %v: a member without the key got in", m.cfg.NodeID, got)
		}
	}
	if got := ids(wrong.Members()); !slices.Equal(got, []string{"wrong"}) {
		t.Fatalf("a member with another key sees %v", got)
	}
	if got := ids(plain.Members()); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("a member without encryption sees %v", got)
	}
	if err := plain.SetKeys([][]byte{k1}); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("SetKeys on a clear-text member: %v", err)
	}

	// Rotation, one step on every member at a time.
	for _, step := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		for _, m := range []*Memberlist{a, b} {
			if err := m.SetKeys(step); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := startKeyed(t, "c", [][]byte{k2}, b.Addr())
	for _, m := range []*Memberlist{a, b, c} {
		waitFor(t, "a, b and c after the rotation", func() bool { return slices.Equal(ids(m.Members()), []string{"a", "b", "c"}) })
	}
	old := startKeyed(t, "old", [][]byte{k1}, a.Addr())
	time.Sleep(time.Second)
	if got := ids(old.Members()); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("a member with the dropped key sees %v", got)
	}

	if _, err := New(Config{NodeID: "x", Role: RoleStorage, Keys: [][]byte{[]byte("short")}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a 5-byte key: %v", err)
	}
}
