package placement

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// metaCommand wraps an op of the tests below in a catalog command.
func metaCommand(op proto.Message) *pb.CatalogCommand {
	cmd := &pb.CatalogCommand{NowMs: 1}
	switch op := op.(type) {
	case *pb.RegisterNodes:
		cmd.Op = &pb.CatalogCommand_RegisterNodes{RegisterNodes: op}
	case *pb.CreateGroups:
		cmd.Op = &pb.CatalogCommand_CreateGroups{CreateGroups: op}
	case *pb.CreateEntityCommand:
		cmd.Op = &pb.CatalogCommand_CreateEntity{CreateEntity: op}
	case *pb.DeleteEntityCommand:
		cmd.Op = &pb.CatalogCommand_DeleteEntity{DeleteEntity: op}
	default:
		panic(fmt.Sprintf("no op for %T", op))
	}
	return cmd
}

// createQueue is the command that creates queue name with partitions
// partitions over groups 1, 2, 3 in turn.
func createQueue(name string, partitions uint32) *pb.CatalogCommand {
	c := &pb.CreateEntityCommand{Name: name, Properties: &pb.QueueProperties{PartitionCount: partitions}}
	for i := range max(partitions, 1) {
		c.PartitionGroups = append(c.PartitionGroups, uint64(i%3)+1)
	}
	return metaCommand(c)
}

// TestRaftConvergence runs the catalog's FSM (through raftFSM) under a
// real 3-member hashicorp/raft group on InmemTransport, in virtual time:
// it creates entities, isolates the leader, creates more on the new
// leader, heals the partition, and checks that every FSM holds the same
// catalog with every acknowledged entity, and that the old leader's
// writes made in isolation are gone.
func TestRaftConvergence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type member struct {
			fsm   *catalog.FSM
			raft  *raft.Raft
			trans *raft.InmemTransport
		}
		var ms []*member
		var servers []raft.Server
		for i := range 3 {
			addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("m%d", i)))
			ms = append(ms, &member{fsm: catalog.NewFSM(), trans: trans})
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
			r, err := raft.NewRaft(conf, raftFSM{m.fsm}, store, store, snaps, m.trans)
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
			data, err := catalog.Encode(cmd)
			if err != nil {
				t.Fatal(err)
			}
			f := m.raft.Apply(data, time.Second)
			if err := f.Error(); err != nil {
				return err
			}
			return f.Response().(catalog.Result).Err
		}
		leader := leaderOf(ms)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(apply(leader, metaCommand(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", Alive: true}, {Id: "n2", Alive: true}, {Id: "n3", Alive: true}}})))
		must(apply(leader, metaCommand(&pb.CreateGroups{Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}, {NodeId: "n2"}, {NodeId: "n3"}}}, {Replicas: []*pb.Replica{{NodeId: "n2"}}}, {Replicas: []*pb.Replica{{NodeId: "n3"}}}}})))
		for i := range 20 {
			name := fmt.Sprintf("before-%d", i)
			must(apply(leader, createQueue(name, uint32(i%3))))
			acked[name] = true
		}

		// Isolate the leader. Its writes can no longer commit.
		for _, m := range ms {
			if m != leader {
				m.trans.Disconnect(leader.trans.LocalAddr())
				leader.trans.Disconnect(m.trans.LocalAddr())
			}
		}
		if err := apply(leader, createQueue("isolated", 0)); err == nil {
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
			must(apply(next, createQueue(name, 2)))
			acked[name] = true
		}
		must(apply(next, metaCommand(&pb.DeleteEntityCommand{Name: "before-3"})))
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
			m.fsm.Read(func(s *catalog.State) { snap = s.Snapshot() })
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

type memSink struct {
	bytes.Buffer
	canceled, closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.canceled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// TestRaftFSM: the adapter hands the catalog the commands of a batch and
// Raft their results in place (nil for a configuration entry), persists
// the catalog's snapshot bytes unchanged, and closes what it restores
// from.
func TestRaftFSM(t *testing.T) {
	cat := catalog.NewFSM()
	f := raftFSM{cat}
	var logs []*raft.Log
	for i, cmd := range []*pb.CatalogCommand{
		metaCommand(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", Alive: true}}}),
		metaCommand(&pb.CreateGroups{Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}}}}}),
		createQueue("q", 0),
		createQueue("q", 0), // refused: the name is taken
	} {
		data, err := catalog.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogConfiguration})
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: data})
	}
	out := f.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("%d results for %d entries", len(out), len(logs))
	}
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			if out[i] != nil {
				t.Errorf("entry %d, a configuration: result %v", l.Index, out[i])
			}
			continue
		}
		res, ok := out[i].(catalog.Result)
		if !ok || res.Index != l.Index {
			t.Fatalf("entry %d: result %#v", l.Index, out[i])
		}
		if wantErr := i == len(logs)-1; (res.Err != nil) != wantErr {
			t.Errorf("entry %d: err %v", l.Index, res.Err)
		}
	}

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil || sink.canceled || !sink.closed {
		t.Fatalf("persist: %v canceled=%v closed=%v", err, sink.canceled, sink.closed)
	}
	snap.Release()
	taken, err := cat.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if _, err := taken.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want.Bytes()) {
		t.Fatal("persisted other bytes than the catalog's snapshot")
	}

	other := raftFSM{catalog.NewFSM()}
	rc := &closeCounter{Reader: bytes.NewReader(sink.Bytes())}
	if err := other.Restore(rc); err != nil || rc.closed != 1 {
		t.Fatalf("restore: %v, closed %d times", err, rc.closed)
	}
	if !proto.Equal(other.c.Table(), cat.Table()) {
		t.Fatal("the restored catalog differs")
	}
	rc = &closeCounter{Reader: bytes.NewReader([]byte{9})}
	if err := other.Restore(rc); err == nil || rc.closed != 1 {
		t.Fatalf("restore of format 9: %v, closed %d times", err, rc.closed)
	}
}
