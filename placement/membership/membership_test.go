package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, id, zone string, seeds ...string) *Memberlist {
	t.Helper()
	m, err := New(Config{
		NodeID: id, Role: RoleStorage, GRPCAddr: id + ".grpc:7000", Zone: zone,
		BindAddr: "127.0.0.1:0", Seeds: seeds, Network: "local", Logger: quiet(),
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

// waitFor polls until cond holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ids(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.NodeID)
	}
	return out
}

func TestJoinSeeMetadataAndLeave(t *testing.T) {
	a := start(t, "a", "z1")
	changed := a.Changed()
	b := start(t, "b", "z2", a.Addr())
	c := start(t, "c", "z3", b.Addr()) // any member is a seed
	for _, m := range []*Memberlist{a, b, c} {
		waitFor(t, "three members", func() bool { return slices.Equal(ids(m.Members()), []string{"a", "b", "c"}) })
	}
	select {
	case <-changed:
	default:
		t.Fatal("joins did not signal a change")
	}
	got := a.Members()
	want := []Member{
		{NodeID: "a", Role: RoleStorage, GRPCAddr: "a.grpc:7000", Zone: "z1"},
		{NodeID: "b", Role: RoleStorage, GRPCAddr: "b.grpc:7000", Zone: "z2"},
		{NodeID: "c", Role: RoleStorage, GRPCAddr: "c.grpc:7000", Zone: "z3"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}

	changed = a.Changed()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(15 * time.Second):
		t.Fatal("a leave did not signal a change")
	}
	waitFor(t, "c gone", func() bool { return slices.Equal(ids(a.Members()), []string{"a", "b"}) })
}

func TestRejoinWhenSeedComesLater(t *testing.T) {
	// b starts first with a seed that is not up yet.
	probe := start(t, "probe", "z")
	seed := probe.Addr()
	probe.Close()
	time.Sleep(100 * time.Millisecond)

	m, err := New(Config{NodeID: "b", Role: RoleFrontend, BindAddr: "127.0.0.1:0", Seeds: []string{seed},
		Network: "local", RejoinInterval: 100 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if got := ids(m.Members()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("alone: %v", got)
	}
	// Now a member comes up at the seed address.
	a, err := New(Config{NodeID: "a", Role: RoleStorage, BindAddr: seed, Network: "local", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Skipf("the seed port was taken meanwhile: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	waitFor(t, "b to rejoin", func() bool { return slices.Equal(ids(m.Members()), []string{"a", "b"}) })
}

func TestConfigValidate(t *testing.T) {
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'x'
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{NodeID: "n", Role: RoleGateway}, true},
		{"no id", Config{Role: RoleGateway}, false},
		{"no role", Config{NodeID: "n"}, false},
		{"bad bind", Config{NodeID: "n", Role: RoleGateway, BindAddr: "nohost"}, false},
		{"bad port", Config{NodeID: "n", Role: RoleGateway, BindAddr: "h:99999"}, false},
		{"bad network", Config{NodeID: "n", Role: RoleGateway, Network: "moon"}, false},
		{"meta too big", Config{NodeID: "n", Role: RoleGateway, Zone: string(long)}, false},
	} {
		err := tt.cfg.Validate()
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", tt.name, err)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	in := Member{NodeID: "n1", Role: RoleStorage, GRPCAddr: "10.0.0.1:7000", Zone: "eu-1a"}
	data, err := EncodeMeta(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeMeta(data)
	if err != nil || out != in {
		t.Fatalf("got %v, %v", out, err)
	}
	for _, bad := range [][]byte{nil, {2}, {metaFormat, 0xff}, {metaFormat}} {
		if _, err := DecodeMeta(bad); !errors.Is(err, ErrMeta) {
			t.Errorf("DecodeMeta(%x) = %v", bad, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	data, _ := EncodeMeta(Member{NodeID: "n1", Role: RoleStorage, GRPCAddr: "h:1", Zone: "z"})
	f.Add(data)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMeta(data)
		if err != nil {
			return
		}
		again, err := EncodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		if m2, err := DecodeMeta(again); err != nil || m2 != m {
			t.Fatal(fmt.Sprint("re-encoding changed the member: ", m, m2, err))
		}
	})
}
