package partition_test

import (
	"maps"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rearms is what RearmsTimers must answer for every command kind (the
// fields of Command's op). A new kind fails TestRearmsTimersCoversEveryCommand
// until it is added here.
var rearms = map[protoreflect.Name]bool{
	"upsert_entity":      true, // as the leader's clock has always had it; no scenario below moves a due time with it
	"enqueue":            true, // a scheduled message, a message with a time to live
	"lock":               true, // a message lock
	"renew_locks":        true, // a later lock expiry
	"settle":             true, // a lock ends; an abandoned message's expiry counts again
	"lock_by_sequence":   true, // a deferred message's lock
	"accept_session":     true, // a session lock
	"renew_session_lock": true, // a later session lock expiry
	"release_session":    true, // a session lock ends
	// The timers' own commands: the leader reads the due times again after
	// proposing them.
	"expire_locks":         false,
	"activate_scheduled":   false,
	"expire_messages":      false,
	"expire_session_locks": false,
	"delete_entity":        false, // removes due times only
	"cancel_scheduled":     false, // removes due times only
	"stage_body":           false,
	"set_session_state":    false,
	"purge":                false, // removes due times only
	// A re-driven message's time to live starts again, so Redrive can
	// create a message expiry; the leader finds it at its next poll
	// (node's maxExpiryPoll) rather than at once.
	"redrive": false,
}

// TestRearmsTimersCoversEveryCommand: RearmsTimers answers for every
// command kind as the table says.
func TestRearmsTimersCoversEveryCommand(t *testing.T) {
	op := (&partitionpb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	if op == nil {
		t.Fatal("Command has no oneof op")
	}
	seen := map[protoreflect.Name]bool{}
	for i := range op.Fields().Len() {
		f := op.Fields().Get(i)
		seen[f.Name()] = true
		want, ok := rearms[f.Name()]
		if !ok {
			t.Errorf("command %s: say in rearms whether it may create or move a due time", f.Name())
			continue
		}
		c := &partitionpb.Command{}
		r := c.ProtoReflect()
		r.Set(f, r.NewField(f))
		if got := partition.RearmsTimers(c); got != want {
			t.Errorf("RearmsTimers(%s) = %v, want %v", f.Name(), got, want)
		}
	}
	for name := range rearms {
		if !seen[name] {
			t.Errorf("rearms names %s, which Command does not have", name)
		}
	}
	if partition.RearmsTimers(&partitionpb.Command{}) {
		t.Error("RearmsTimers of a command without an op")
	}
}

// dues is every timer's due time, by name.
func dues(m *partition.Machine) map[string]int64 {
	d := map[string]int64{}
	for _, tm := range m.Timers() {
		if ms, ok := tm.Next(); ok {
			d[tm.Name] = ms
		}
	}
	return d
}

// TestRearmingCommandsMoveDueTimes: each command that RearmsTimers names
// (but UpsertEntity) does create or move a due time in a scenario.
func TestRearmingCommandsMoveDueTimes(t *testing.T) {
	const main = partitionpb.SubQueue_SUB_QUEUE_MAIN
	ttl := func(body string) *partitionpb.NewMessage {
		m := pt.Msg(body)
		m.TtlMs = 60_000
		return m
	}
	tests := []struct {
		name  string
		setup func(d *pt.Driver) (tokens [][]byte) // at 1000
		cmd   func(tokens [][]byte) *partitionpb.Command
	}{
		{"enqueue", func(d *pt.Driver) [][]byte { d.OK(pt.Upsert(pt.Queue(1, 0, "q"))); return nil },
			func([][]byte) *partitionpb.Command { return pt.Enqueue(1, 0, ttl("a")) }},
		{"lock", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.Msg("a")))
			return nil
		}, func([][]byte) *partitionpb.Command { return pt.Lock(1, 0, main, 1, 1) }},
		{"renew_locks", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.Msg("a")))
			tokens := pt.Tokens(d.OK(pt.Lock(1, 0, main, 1, 1)))
			d.Now = 2000
			return tokens
		}, func(tokens [][]byte) *partitionpb.Command { return pt.Renew(1, 0, main, tokens...) }},
		{"settle", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, ttl("a")))
			return pt.Tokens(d.OK(pt.Lock(1, 0, main, 1, 1)))
		}, func(tokens [][]byte) *partitionpb.Command {
			return pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_ABANDON, tokens...)
		}},
		{"lock_by_sequence", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.Msg("a")))
			tokens := pt.Tokens(d.OK(pt.Lock(1, 0, main, 1, 1)))
			d.OK(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_DEFER, tokens...))
			return nil
		}, func([][]byte) *partitionpb.Command {
			return pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}, TokenSeed: pt.Seed(2)})
		}},
		{"accept_session", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.SessionQueue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.SessionMsg("s", "a")))
			return nil
		}, func([][]byte) *partitionpb.Command { return pt.Accept(1, 0, "s", pt.SessionToken(1)) }},
		{"renew_session_lock", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.SessionQueue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.SessionMsg("s", "a")))
			d.OK(pt.Accept(1, 0, "s", pt.SessionToken(1)))
			d.Now = 2000
			return nil
		}, func([][]byte) *partitionpb.Command { return pt.RenewSession(1, 0, "s", pt.SessionToken(1)) }},
		{"release_session", func(d *pt.Driver) [][]byte {
			d.OK(pt.Upsert(pt.SessionQueue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.SessionMsg("s", "a")))
			d.OK(pt.Accept(1, 0, "s", pt.SessionToken(1)))
			return nil
		}, func([][]byte) *partitionpb.Command { return pt.Release(1, 0, "s", pt.SessionToken(1)) }},
	}
	tested := map[protoreflect.Name]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := pt.NewDriver(t, 1000)
			c := tt.cmd(tt.setup(d))
			name := c.ProtoReflect().WhichOneof(c.ProtoReflect().Descriptor().Oneofs().ByName("op")).Name()
			if string(name) != tt.name {
				t.Fatalf("the scenario's command is %s", name)
			}
			tested[name] = true
			if !partition.RearmsTimers(c) {
				t.Errorf("RearmsTimers(%s) = false", name)
			}
			before := dues(d.M)
			d.OK(c)
			if after := dues(d.M); maps.Equal(before, after) {
				t.Errorf("due times %v before and after %s", before, name)
			}
		})
	}
	for name, want := range rearms {
		if want && !tested[name] && name != "upsert_entity" {
			t.Errorf("no scenario shows %s moving a due time", name)
		}
	}
}
