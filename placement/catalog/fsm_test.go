package catalog

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// fsmDriver feeds encoded commands to an FSM as the meta group's log
// would.
type fsmDriver struct {
	t     *testing.T
	f     *FSM
	index uint64
}

func (d *fsmDriver) entry(data []byte) Result {
	d.t.Helper()
	d.index++
	return d.f.ApplyEntry(d.index, data)
}

func (d *fsmDriver) apply(cmd *pb.CatalogCommand) Result {
	d.t.Helper()
	data, err := Encode(cmd)
	if err != nil {
		d.t.Fatal(err)
	}
	return d.entry(data)
}

func populated(t *testing.T) *fsmDriver {
	d := &fsmDriver{t: t, f: NewFSM()}
	d.apply(wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", Zone: "a", Alive: true}, {Id: "n2", Zone: "b", Alive: true}, {Id: "n3", Zone: "c"}}}))
	d.apply(wrap(&pb.CreateGroups{Groups: []*pb.NewGroup{
		{Replicas: []*pb.Replica{{NodeId: "n1"}, {NodeId: "n2"}}},
		{Replicas: []*pb.Replica{{NodeId: "n2"}, {NodeId: "n3"}}},
		{Replicas: []*pb.Replica{{NodeId: "n3"}, {NodeId: "n1"}}},
	}}))
	for _, name := range []string{"a", "b", "c", "d"} {
		if res := d.apply(create(name, 3)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	d.apply(wrap(&pb.DeleteEntityCommand{Name: "B"}))
	d.apply(wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: 2, LeaderId: "n3", HasQuorum: true}}}))
	d.apply(wrap(&pb.CompleteTasks{Tasks: []*pb.PartitionTask{{EntityId: 1, Partition: 0, Version: 3}}}))
	return d
}

func TestFSMSnapshotRestore(t *testing.T) {
	d := populated(t)
	snap, err := d.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bytes.Buffer
	if _, err := snap.WriteTo(&sink); err != nil {
		t.Fatalf("write: %v", err)
	}

	restored := NewFSM()
	changed := restored.Changed()
	if err := restored.Restore(bytes.NewReader(sink.Bytes())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("Restore did not signal a change")
	}
	var want, got *pb.CatalogSnapshot
	d.f.Read(func(s *State) { want = s.Snapshot() })
	restored.Read(func(s *State) { got = s.Snapshot() })
	if !proto.Equal(got, want) {
		t.Fatalf("restored catalog differs:\ngot  %v\nwant %v", got, want)
	}
	if !proto.Equal(restored.Table(), d.f.Table()) {
		t.Fatal("routing tables differ")
	}
	if len(got.Tasks) == 0 || got.AppliedIndex != d.index || got.NextEntityId != 5 {
		t.Fatalf("snapshot lost something: tasks=%d applied=%d next=%d", len(got.Tasks), got.AppliedIndex, got.NextEntityId)
	}

	// Both go on alike: the deleted id stays used, names stay taken.
	other := &fsmDriver{t: t, f: restored, index: d.index}
	for _, dr := range []*fsmDriver{d, other} {
		if res := dr.apply(create("e", 0)); res.Err != nil || res.Entity.Id != 5 {
			t.Fatalf("create after restore: %v", res)
		}
		if res := dr.apply(create("A", 0)); !errors.Is(res.Err, ErrNameTaken) {
			t.Fatalf("name after restore: %v", res.Err)
		}
	}
	d.f.Read(func(s *State) { want = s.Snapshot() })
	restored.Read(func(s *State) { got = s.Snapshot() })
	if !proto.Equal(got, want) {
		t.Fatal("catalogs diverged after the same commands")
	}
}

// TestFSMSnapshotPersistsWhatWasTaken: WriteTo encodes the snapshot after
// Snapshot returned, while applies go on; what it writes is the catalog
// as of Snapshot, whatever changed since (records replaced, removed,
// groups, nodes, tasks and rules changed).
func TestFSMSnapshotPersistsWhatWasTaken(t *testing.T) {
	d := populated(t)
	var want *pb.CatalogSnapshot
	d.f.Read(func(s *State) { want = proto.Clone(s.Snapshot()).(*pb.CatalogSnapshot) })
	snap, err := d.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []*pb.CatalogCommand{
		wrap(&pb.UpdateEntityCommand{Name: "a", Properties: &pb.QueueProperties{UserMetadata: "later"}}),
		wrap(&pb.DeleteEntityCommand{Name: "c"}),
		create("e", 2),
		wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: 1, LeaderId: "n1", HasQuorum: true}, {GroupId: 2, LeaderId: "n2"}}}),
		wrap(&pb.DrainNodeRequest{NodeId: "n1", Draining: true}),
		wrap(&pb.CompleteTasks{Tasks: d.tasks()}),
		putRule("later", "", 1, true),
	} {
		if res := d.apply(cmd); res.Err != nil {
			t.Fatalf("%v: %v", cmd, res.Err)
		}
	}
	var sink bytes.Buffer
	if _, err := snap.WriteTo(&sink); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := DecodeSnapshot(sink.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("persisted a catalog other than the one taken:\ngot  %v\nwant %v", got, want)
	}
}

func TestFSMRestoreRejectsBadSnapshots(t *testing.T) {
	d := populated(t)
	var snap *pb.CatalogSnapshot
	d.f.Read(func(s *State) { snap = s.Snapshot() })
	dupName := proto.Clone(snap).(*pb.CatalogSnapshot)
	dupName.Entities[1].Name = "A"
	reused := proto.Clone(snap).(*pb.CatalogSnapshot)
	reused.NextEntityId = 2
	unknownGroup := proto.Clone(snap).(*pb.CatalogSnapshot)
	unknownGroup.Entities[0].PartitionGroups[0] = 42
	for name, s := range map[string]*pb.CatalogSnapshot{"duplicate name": dupName, "id counter behind": reused, "unknown group": unknownGroup} {
		data, _ := EncodeSnapshot(s)
		f := NewFSM()
		if err := f.Restore(bytes.NewReader(data)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Restore = %v, want %v", name, err, ErrCorrupt)
		}
	}
	f := NewFSM()
	if err := f.Restore(bytes.NewReader([]byte{9, 1, 2})); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("format 9: %v", err)
	}
}

func TestFSMStopsOnUnknownEntries(t *testing.T) {
	for name, data := range map[string][]byte{
		"format 2":     {2, 0x08, 0x01},
		"garbage":      {FormatV1, 0xff, 0xff, 0xff},
		"empty":        {},
		"future op":    {FormatV1, 0x92, 0x03, 0x00}, // field 50, empty bytes
		"no op at all": {FormatV1, 0x08, 0x05},       // now_ms only
	} {
		t.Run(name, func(t *testing.T) {
			d := populated(t)
			before := d.f.Table()
			res := d.entry(data)
			if !errors.Is(res.Err, ErrStopped) {
				t.Fatalf("got %v, want %v", res.Err, ErrStopped)
			}
			select {
			case <-d.f.Stopped():
			default:
				t.Fatal("Stopped not closed")
			}
			if d.f.Err() == nil {
				t.Fatal("Err is nil")
			}
			// Later entries are refused too, and nothing changes.
			if res := d.apply(create("later", 0)); !errors.Is(res.Err, ErrStopped) {
				t.Fatalf("a later entry: %v", res.Err)
			}
			if !proto.Equal(d.f.Table(), before) {
				t.Fatal("the catalog changed after the failure")
			}
			if _, err := d.f.Snapshot(); err == nil {
				t.Fatal("a stopped FSM made a snapshot")
			}
		})
	}
}

func TestFSMChangedAndTable(t *testing.T) {
	d := populated(t)
	t1 := d.f.Table()
	if d.f.Table() != t1 {
		t.Fatal("the table is not shared while nothing changes")
	}
	ch := d.f.Changed()
	if res := d.apply(create("a", 0)); res.Err == nil {
		t.Fatal("duplicate accepted")
	}
	select {
	case <-ch:
		t.Fatal("a rejected command signalled a change")
	default:
	}
	d.apply(wrap(&pb.CompleteTasks{Tasks: d.tasks()}))
	select {
	case <-ch:
	default:
		t.Fatal("completing tasks signalled no change")
	}
	if d.f.Table().Version != t1.Version {
		t.Fatal("completing tasks changed the routing table's version")
	}
	res := d.apply(create("new", 0))
	if v := d.f.Table().Version; v != res.Index {
		t.Fatalf("table version %d, want the create's index %d", v, res.Index)
	}
}

func (d *fsmDriver) tasks() []*pb.PartitionTask {
	var tasks []*pb.PartitionTask
	d.f.Read(func(s *State) { tasks = s.Tasks() })
	return tasks
}

// TestTableOutlivesChanges: a routing table handed out shares the
// catalog's entity records, so no later command may change what it
// shows (records are replaced, never changed in place), and it shows
// degraded entities as degraded whatever their records say.
func TestTableOutlivesChanges(t *testing.T) {
	d := populated(t)
	d.apply(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
		Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{2}}))
	d.apply(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{2}}))
	before := d.f.Table()
	kept := proto.Clone(before).(*pb.RoutingTable)
	for _, cmd := range []*pb.CatalogCommand{
		wrap(&pb.UpdateEntityCommand{Name: "a", Properties: &pb.QueueProperties{LockDurationMs: 5000}, Status: pb.EntityStatus_ENTITY_STATUS_DISABLED}),
		wrap(&pb.AddRuleCommand{Subscription: "t/Subscriptions/s", Rule: &pb.Rule{Name: "r", Filter: &pb.Rule_TrueFilter{TrueFilter: true}}}),
		wrap(&pb.ReplaceRuleCommand{Subscription: "t/Subscriptions/s", Rule: &pb.Rule{Name: "r", Filter: &pb.Rule_FalseFilter{FalseFilter: true}}}),
		wrap(&pb.RemoveRuleCommand{Subscription: "t/Subscriptions/s", RuleName: "$Default"}),
		wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: 1, LeaderId: "n1", HasQuorum: true}, {GroupId: 3, LeaderId: "n1", HasQuorum: true}}}),
		wrap(&pb.DeleteEntityCommand{Name: "c"}),
	} {
		if res := d.apply(cmd); res.Err != nil {
			t.Fatalf("%v: %v", cmd, res.Err)
		}
	}
	if !proto.Equal(before, kept) {
		t.Fatal("later commands changed a routing table handed out before them")
	}
	after := d.f.Table()
	for _, e := range after.Entities {
		var wantDegraded bool
		d.f.Read(func(s *State) { wantDegraded = s.Entity(e.Name).Degraded })
		if e.Degraded != wantDegraded {
			t.Errorf("%s: degraded %v in the table, %v when read", e.Name, e.Degraded, wantDegraded)
		}
	}
	var degraded int
	for _, e := range before.Entities {
		if e.Degraded {
			degraded++
		}
	}
	if degraded == 0 {
		t.Fatal("no entity was degraded before the group reports: the test checks nothing")
	}
}
