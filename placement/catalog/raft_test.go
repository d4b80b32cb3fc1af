package catalog

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestRaftConvergence runs the FSM under a real 3-member hashicorp/raft
// group on InmemTransport, in virtual time: it creates entities, isolates
// the leader, creates more on the new leader, heals the partition, and
// checks that every FSM holds the same catalog with every acknowledged
// entity, and that the old leader's writes made in isolation are gone.
func TestRaftConvergence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type member struct {
			fsm   *FSM
			raft  *raft.Raft
			trans *raft.InmemTransport
		}
		var ms []*member
		var servers []raft.Server
		for i := range 3 {
			addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("m%d", i)))
			ms = append(ms, &member{fsm: NewFSM(), trans: trans})
			servers = append(servers, raft.Server{ID: raft.ServerID(addr), Address: addr})
		}
		connectAll := func() {
			for _, a := range ms {
				for _, b := range ms {
					if a != b {
						a.trans.Connect(b.trans.LocalAddr(), b.trans)
					}
				}
			}
		}
		connectAll()
		for i, m := range ms {
			conf := raft.DefaultConfig()
			conf.LocalID = servers[i].ID
			conf.Logger = hclog.NewNullLogger()
			store := raft.NewInmemStore()
			snaps := raft.NewInmemSnapshotStore()
			if err := raft.BootstrapCluster(conf, store, store, snaps, m.trans, raft.Configuration{Servers: servers}); err != nil {
				t.Fatal(err)
			}
			r, err := raft.NewRaft(conf, m.fsm, store, store, snaps, m.trans)
			if err != nil {
				t.Fatal(err)
			}
			m.raft = r
		}
		leaderOf := func(among []*member) *member {
			for range 600 {
				time.Sleep(100 * time.Millisecond)
				for _, m := range among {
					if m.raft.State() == raft.Leader {
						return m
					}
				}
			}
			t.Fatal("no leader within a minute of virtual time")
			return nil
		}
		acked := map[string]bool{}
		apply := func(m *member, cmd *pb.CatalogCommand) error {
			data, err := Encode(cmd)
			if err != nil {
				t.Fatal(err)
			}
			f := m.raft.Apply(data, time.Second)
			if err := f.Error(); err != nil {
				return err
			}
			return f.Response().(Result).Err
		}
		leader := leaderOf(ms)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(apply(leader, wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", Alive: true}, {Id: "n2", Alive: true}, {Id: "n3", Alive: true}}})))
		must(apply(leader, wrap(&pb.CreateGroups{Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}, {NodeId: "n2"}, {NodeId: "n3"}}}, {Replicas: []*pb.Replica{{NodeId: "n2"}}}, {Replicas: []*pb.Replica{{NodeId: "n3"}}}}})))
		for i := range 20 {
			name := fmt.Sprintf("before-%d", i)
			must(apply(leader, create(name, uint32(i%3))))
			acked[name] = true
		}

		// Isolate the leader. Its writes can no longer commit.
		for _, m := range ms {
			if m != leader {
				m.trans.Disconnect(leader.trans.LocalAddr())
				leader.trans.Disconnect(m.trans.LocalAddr())
			}
		}
		if err := apply(leader, create("isolated", 0)); err == nil {
			t.Fatal("the isolated leader acknowledged a write")
		}
		var rest []*member
		for _, m := range ms {
			if m != leader {
				rest = append(rest, m)
			}
		}
		next := leaderOf(rest)
		for i := range 20 {
			name := fmt.Sprintf("after-%d", i)
			must(apply(next, create(name, 2)))
			acked[name] = true
		}
		must(apply(next, wrap(&pb.DeleteEntityCommand{Name: "before-3"})))
		delete(acked, "before-3")

		connectAll()
		must(next.raft.Barrier(time.Second).Error())
		want := next.raft.AppliedIndex()
		for _, m := range ms {
			for m.raft.AppliedIndex() < want {
				time.Sleep(50 * time.Millisecond)
			}
		}
		var first *pb.CatalogSnapshot
		for i, m := range ms {
			var snap *pb.CatalogSnapshot
			m.fsm.Read(func(s *State) { snap = s.Snapshot() })
			snap.AppliedIndex = 0 // a member may have applied a later no-op entry
			if i == 0 {
				first = snap
			} else if !proto.Equal(snap, first) {
				t.Fatalf("member %d holds another catalog", i)
			}
			names := map[string]bool{}
			for _, e := range snap.Entities {
				names[e.Name] = true
			}
			for name := range acked {
				if !names[name] {
					t.Fatalf("member %d lost acknowledged %s", i, name)
				}
			}
			if names["isolated"] || names["before-3"] || len(names) != len(acked) {
				t.Fatalf("member %d holds %d entities, want %d", i, len(names), len(acked))
			}
		}
		for _, m := range ms {
			must(m.raft.Shutdown().Error())
		}
	})
}
