package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// applier drives a State with consecutive log indexes.
type applier struct {
	t     testing.TB
	s     *State
	index uint64
}

func newApplier(t testing.TB, groups int) *applier {
	a := &applier{t: t, s: New()}
	nodes := &pb.RegisterNodes{}
	cg := &pb.CreateGroups{}
	for i := range 3 {
		nodes.Nodes = append(nodes.Nodes, &pb.Node{Id: fmt.Sprintf("n%d", i+1), Alive: true})
	}
	for range groups {
		cg.Groups = append(cg.Groups, &pb.NewGroup{Replicas: []*pb.Replica{{NodeId: "n1"}, {NodeId: "n2"}, {NodeId: "n3"}}})
	}
	a.must(wrap(nodes))
	if groups > 0 {
		a.must(wrap(cg))
	}
	return a
}

func (a *applier) apply(cmd *pb.CatalogCommand) Result {
	a.t.Helper()
	a.index++
	res, err := a.s.Apply(a.index, cmd)
	if err != nil {
		a.t.Fatalf("apply @%d: %v", a.index, err)
	}
	return res
}

func (a *applier) must(cmd *pb.CatalogCommand) Result {
	a.t.Helper()
	res := a.apply(cmd)
	if res.Err != nil {
		a.t.Fatalf("apply @%d: %v", a.index, res.Err)
	}
	return res
}

func wrap(op proto.Message) *pb.CatalogCommand {
	cmd := &pb.CatalogCommand{NowMs: 1}
	switch op := op.(type) {
	case *pb.RegisterNodes:
		cmd.Op = &pb.CatalogCommand_RegisterNodes{RegisterNodes: op}
	case *pb.CreateGroups:
		cmd.Op = &pb.CatalogCommand_CreateGroups{CreateGroups: op}
	case *pb.CreateEntityCommand:
		cmd.Op = &pb.CatalogCommand_CreateEntity{CreateEntity: op}
	case *pb.UpdateEntityCommand:
		cmd.Op = &pb.CatalogCommand_UpdateEntity{UpdateEntity: op}
	case *pb.DeleteEntityCommand:
		cmd.Op = &pb.CatalogCommand_DeleteEntity{DeleteEntity: op}
	case *pb.ReportGroupsRequest:
		cmd.Op = &pb.CatalogCommand_ReportGroups{ReportGroups: op}
	case *pb.CompleteTasks:
		cmd.Op = &pb.CatalogCommand_CompleteTasks{CompleteTasks: op}
	case *pb.StartMove:
		cmd.Op = &pb.CatalogCommand_StartMove{StartMove: op}
	case *pb.FinishMove:
		cmd.Op = &pb.CatalogCommand_FinishMove{FinishMove: op}
	case *pb.DrainNodeRequest:
		cmd.Op = &pb.CatalogCommand_DrainNode{DrainNode: op}
	case *pb.AddRuleCommand:
		cmd.Op = &pb.CatalogCommand_AddRule{AddRule: op}
	case *pb.ReplaceRuleCommand:
		cmd.Op = &pb.CatalogCommand_ReplaceRule{ReplaceRule: op}
	case *pb.RemoveRuleCommand:
		cmd.Op = &pb.CatalogCommand_RemoveRule{RemoveRule: op}
	default:
		panic(fmt.Sprintf("no op for %T", op))
	}
	return cmd
}

func create(name string, partitions uint32) *pb.CatalogCommand {
	c := &pb.CreateEntityCommand{Name: name, Properties: &pb.QueueProperties{PartitionCount: partitions}}
	for i := range max(partitions, 1) {
		c.PartitionGroups = append(c.PartitionGroups, uint64(i%3)+1)
	}
	return wrap(c)
}

func TestEntityLimits(t *testing.T) {
	a := newApplier(t, 3)
	for i := range MaxPartitionedEntities {
		a.must(create(fmt.Sprintf("p%d", i), 2))
	}
	if res := a.apply(create("p-extra", 4)); !errors.Is(res.Err, ErrTooManyPartitioned) {
		t.Fatalf("partitioned entity %d: got %v, want %v", MaxPartitionedEntities+1, res.Err, ErrTooManyPartitioned)
	}
	for i := MaxPartitionedEntities; i < MaxEntities; i++ { // plain entities are still welcome
		a.must(create(fmt.Sprintf("q%d", i), 0))
	}
	if res := a.apply(create("q-extra", 0)); !errors.Is(res.Err, ErrTooManyEntities) {
		t.Fatalf("entity %d: got %v, want %v", MaxEntities+1, res.Err, ErrTooManyEntities)
	}
	// Deleting frees a slot; the freed partitioned slot takes a partitioned entity.
	a.must(wrap(&pb.DeleteEntityCommand{Name: "P7"}))
	res := a.must(create("p-again", 2))
	if res.Entity.Id != MaxEntities+1 {
		t.Errorf("id after delete = %d, want %d (never reused)", res.Entity.Id, MaxEntities+1)
	}
	if res := a.apply(create("one-more", 0)); !errors.Is(res.Err, ErrTooManyEntities) {
		t.Fatalf("after refill: got %v, want %v", res.Err, ErrTooManyEntities)
	}
}

// TestWidestEntity: the widest queue or topic is tracked as entities come
// and go, and rebuilt from a snapshot.
func TestWidestEntity(t *testing.T) {
	a := newApplier(t, 3)
	check := func(s *State, want int) {
		t.Helper()
		if got := s.WidestEntity(); got != want {
			t.Fatalf("WidestEntity = %d, want %d", got, want)
		}
	}
	check(a.s, 1)
	a.must(create("plain", 0))
	check(a.s, 1)
	a.must(create("four", 4))
	a.must(create("sixteen", 16))
	a.must(create("sixteen-too", 16))
	check(a.s, 16)
	a.must(wrap(&pb.DeleteEntityCommand{Name: "sixteen"}))
	check(a.s, 16)
	restored, err := FromSnapshot(a.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	check(restored, 16)
	a.must(wrap(&pb.DeleteEntityCommand{Name: "sixteen-too"}))
	check(a.s, 4)
	a.must(wrap(&pb.DeleteEntityCommand{Name: "four"}))
	check(a.s, 1)
}

func TestNormalize(t *testing.T) {
	defaults := &pb.QueueProperties{
		LockDurationMs: 60_000, MaxDeliveryCount: 10, DuplicateDetectionWindowMs: 600_000,
		MaxSizeInMegabytes: 1024, MaxMessageSizeInKilobytes: 256, PartitionCount: 1,
	}
	with := func(f func(p *pb.QueueProperties)) *pb.QueueProperties {
		p := proto.Clone(defaults).(*pb.QueueProperties)
		f(p)
		return p
	}
	tests := []struct {
		name string
		in   *pb.QueueProperties
		want *pb.QueueProperties // nil: invalid
	}{
		{"nil is all defaults", nil, defaults},
		{"empty is all defaults", &pb.QueueProperties{}, defaults},
		{"lock 5 minutes", &pb.QueueProperties{LockDurationMs: 300_000}, with(func(p *pb.QueueProperties) { p.LockDurationMs = 300_000 })},
		{"lock above 5 minutes", &pb.QueueProperties{LockDurationMs: 300_001}, nil},
		{"lock below 1 second", &pb.QueueProperties{LockDurationMs: 999}, nil},
		{"negative lock", &pb.QueueProperties{LockDurationMs: -1}, nil},
		{"max delivery 1", &pb.QueueProperties{MaxDeliveryCount: 1}, with(func(p *pb.QueueProperties) { p.MaxDeliveryCount = 1 })},
		{"negative ttl", &pb.QueueProperties{DefaultMessageTtlMs: -5}, nil},
		{"ttl kept", &pb.QueueProperties{DefaultMessageTtlMs: 5}, with(func(p *pb.QueueProperties) { p.DefaultMessageTtlMs = 5 })},
		{"dup window 20 s", &pb.QueueProperties{DuplicateDetectionWindowMs: 20_000}, with(func(p *pb.QueueProperties) { p.DuplicateDetectionWindowMs = 20_000 })},
		{"dup window above 7 days", &pb.QueueProperties{DuplicateDetectionWindowMs: 7*24*3_600_000 + 1}, nil},
		{"size 0 MB is the default", &pb.QueueProperties{MaxSizeInMegabytes: 0}, defaults},
		{"negative size", &pb.QueueProperties{MaxSizeInMegabytes: -1}, nil},
		{"size too large", &pb.QueueProperties{MaxSizeInMegabytes: 81_921}, nil},
		{"message size too large", &pb.QueueProperties{MaxMessageSizeInKilobytes: 102_401}, nil},
		{"partitioning on: 16", &pb.QueueProperties{EnablePartitioning: true}, with(func(p *pb.QueueProperties) { p.PartitionCount, p.EnablePartitioning = 16, true })},
		{"partition count implies partitioning", &pb.QueueProperties{PartitionCount: 4}, with(func(p *pb.QueueProperties) { p.PartitionCount, p.EnablePartitioning = 4, true })},
		{"one partition is plain", &pb.QueueProperties{PartitionCount: 1}, defaults},
		{"partitioned with one partition", &pb.QueueProperties{PartitionCount: 1, EnablePartitioning: true}, nil},
		{"32 partitions", &pb.QueueProperties{PartitionCount: 32}, with(func(p *pb.QueueProperties) { p.PartitionCount, p.EnablePartitioning = 32, true })},
		{"33 partitions", &pb.QueueProperties{PartitionCount: 33}, nil},
		{"partitioned, 1 MB messages", &pb.QueueProperties{PartitionCount: 2, MaxMessageSizeInKilobytes: 1024}, with(func(p *pb.QueueProperties) {
			p.PartitionCount, p.EnablePartitioning, p.MaxMessageSizeInKilobytes = 2, true, 1024
		})},
		{"partitioned, messages over 1 MB", &pb.QueueProperties{PartitionCount: 2, MaxMessageSizeInKilobytes: 1025}, nil},
		{"forward to a bad name", &pb.QueueProperties{ForwardTo: "a b"}, nil},
		{"forward dead letters", &pb.QueueProperties{ForwardDeadLetteredMessagesTo: "dlq"}, with(func(p *pb.QueueProperties) { p.ForwardDeadLetteredMessagesTo = "dlq" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if tt.want == nil {
				if !errors.Is(err, ErrInvalidProperties) {
					t.Fatalf("got %v, %v; want %v", got, err, ErrInvalidProperties)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.want) {
				t.Fatalf("got  %v\nwant %v", got, tt.want)
			}
			again, err := Normalize(got)
			if err != nil || !proto.Equal(again, got) {
				t.Fatalf("normalizing again gave %v, %v", again, err)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"q", true},
		{"Orders-2024_v1.final", true},
		{"topic/Subscriptions/sub", true},
		{strings.Repeat("a", MaxNameLength), true},
		{strings.Repeat("a", MaxNameLength+1), false},
		{"", false},
		{"with space", false},
		{"q/$DeadLetterQueue", false},
		{"q/$management", false},
		{"ünïcode", false},
		{"a//b", false},
		{"/a", false},
		{"a/", false},
		{"_a", false},
		{"a-", false},
		{"a.b-c_d", true},
	}
	for _, tt := range tests {
		err := CheckName(tt.name)
		if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestPartitionConfig(t *testing.T) {
	a := newApplier(t, 3)
	plain := a.must(create("plain", 0)).Entity
	got := PartitionConfig(plain, 0)
	want := &partitionpb.EntityConfig{
		EntityId: plain.Id, Partition: 0, Name: "plain",
		LockDurationMs: 60_000, MaxDeliveryCount: 10, DuplicateDetectionWindowMs: 600_000,
		MaxSizeBytes: 1024 << 20,
	}
	if !proto.Equal(got, want) {
		t.Errorf("defaults:\ngot  %v\nwant %v", got, want)
	}

	c := &pb.CreateEntityCommand{
		Name: "Sessions", Status: pb.EntityStatus_ENTITY_STATUS_SEND_DISABLED,
		Properties: &pb.QueueProperties{
			LockDurationMs: 30_000, MaxDeliveryCount: 3, DefaultMessageTtlMs: 90_000,
			DeadLetteringOnMessageExpiration: true, RequiresDuplicateDetection: true,
			DuplicateDetectionWindowMs: 60_000, RequiresSession: true, MaxSizeInMegabytes: 2048,
			PartitionCount: 2,
		},
		PartitionGroups: []uint64{2, 3},
	}
	e := a.must(wrap(c)).Entity
	got = PartitionConfig(e, 1)
	want = &partitionpb.EntityConfig{
		EntityId: e.Id, Partition: 1, Name: "Sessions",
		LockDurationMs: 30_000, MaxDeliveryCount: 3, DefaultTtlMs: 90_000,
		DeadLetteringOnExpiration: true, RequiresDuplicateDetection: true,
		DuplicateDetectionWindowMs: 60_000, RequiresSession: true, MaxSizeBytes: 2048 << 20,
		Status: uint32(partitionpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED),
	}
	if !proto.Equal(got, want) {
		t.Errorf("set:\ngot  %v\nwant %v", got, want)
	}
}

func TestEncodeDecode(t *testing.T) {
	cmd := create("q", 4)
	data, err := Encode(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != FormatV1 {
		t.Fatalf("format byte %d", data[0])
	}
	back, err := Decode(data)
	if err != nil || !proto.Equal(back, cmd) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	for _, tt := range []struct {
		data []byte
		want error
	}{
		{nil, ErrCorrupt},
		{[]byte{2, 8, 1}, ErrUnknownFormat},
		{[]byte{FormatV1, 0xff, 0xff}, ErrCorrupt},
	} {
		if _, err := Decode(tt.data); !errors.Is(err, tt.want) {
			t.Errorf("Decode(%x) = %v, want %v", tt.data, err, tt.want)
		}
	}
	// An op a later version adds decodes, with no op this version knows.
	future := protowire.AppendTag([]byte{FormatV1}, 50, protowire.BytesType)
	future = protowire.AppendBytes(future, []byte{8, 1})
	cmd, err = Decode(future)
	if err != nil || cmd.Op != nil {
		t.Fatalf("future op: %v, %v", cmd, err)
	}
	if _, err := New().Apply(1, cmd); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("applying a future op: %v, want %v", err, ErrUnknownCommand)
	}
}
