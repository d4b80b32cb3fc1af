package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestWipedMetaVoterJoins loses the data directory of a first voter of
// the meta group (started with the same -bootstrap list as the others)
// that holds catalog entries the third voter lacks, and restarts it
// empty, with -bootstrap still naming it, while the meta leader is down.
// It must neither bootstrap a catalog of its own nor help the lagging
// voter win an election: that voter would overwrite the entries. Once
// the old leader is back, the entries are there and the wiped voter has
// caught up from it.
func TestWipedMetaVoterJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("three storage processes in one, restarted")
	}
	base := freeNodePort(t, 3)
	dir := t.TempDir()
	ids := []string{"m1", "m2", "m3"}
	var addrs []string
	var members []membership.Member
	for i, id := range ids {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", base+i))
		members = append(members, membership.Member{NodeID: id, Role: membership.RoleStorage, GRPCAddr: addrs[i]})
	}
	servers := Servers(ids, addrs)
	ss := make([]*Storage, 3)
	start := func(i int) {
		t.Helper()
		var ln net.Listener
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if ln, err = net.Listen("tcp", addrs[i]); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		s, err := StartStorage(context.Background(), StorageOptions{
			ID: ids[i], DataDir: filepath.Join(dir, ids[i]), Listener: ln, Bootstrap: servers,
			Members: StaticMembers(members), Groups: 1, Replicas: 3, CacheMB: 8,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatalf("start %s: %v", ids[i], err)
		}
		ss[i] = s
	}
	stop := func(i int) {
		t.Helper()
		if err := ss[i].Close(); err != nil {
			t.Logf("close %s: %v", ids[i], err)
		}
		ss[i] = nil
	}
	t.Cleanup(func() {
		for i := range ss {
			if ss[i] != nil {
				ss[i].Close()
			}
		}
	})
	for i := range ss {
		start(i)
	}
	leader := func() int {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for i, s := range ss {
				if s != nil && s.Placement.IsLeader() {
					return i
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no meta leader within 30 s")
		return -1
	}
	pc, closePC, err := DialPlacementMembers(addrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closePC()
	put := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			_, err := pc.PutAuthorizationRule(ctx, &placementpb.PutAuthorizationRuleRequest{Rule: &placementpb.AuthorizationRule{
				Name: name, Rights: 1, PrimaryKey: "key-" + name,
			}})
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("put rule %s: %v", name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	l := leader()
	put("early")
	w, lag := (l+1)%3, (l+2)%3
	stop(lag)
	put("late") // committed on l and w only
	stop(w)
	if err := os.RemoveAll(filepath.Join(dir, ids[w])); err != nil {
		t.Fatal(err)
	}
	stop(l)
	start(w) // empty, with -bootstrap naming it
	start(lag)
	// The meta election timeout is 1 s: without the guard, the wiped voter
	// bootstraps and votes for the lagging one within a few. Watch ten.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, i := range []int{w, lag} {
			if ss[i].Placement.IsLeader() {
				t.Fatalf("%s became the meta leader while the only voter holding every catalog entry was down", ids[i])
			}
		}
	}

	start(l)
	leader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := pc.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{})
		if err == nil {
			names := map[string]bool{}
			for _, r := range resp.GetRules() {
				names[r.GetName()] = true
			}
			if !names["early"] || !names["late"] {
				t.Fatalf("the catalog lost rules: it holds %v", names)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The wiped voter catches up from the leader: with the leader gone
	// again, it and the lagging one elect one of them.
	select {
	case <-ss[w].Placement.CaughtUp():
	case <-ctx.Done():
		t.Fatalf("%s did not catch up", ids[w])
	}
	l = leader()
	stop(l)
	if got := leader(); got == l {
		t.Fatalf("%s leads while stopped", ids[got])
	}
	put("after")
}
