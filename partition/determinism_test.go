package partition_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

var workloadEntities = []struct {
	id   uint64
	part uint32
	cfg  *partitionpb.EntityConfig
}{
	{1, 0, &partitionpb.EntityConfig{EntityId: 1, Partition: 0, Name: "q1", LockDurationMs: 10_000, MaxDeliveryCount: 3}},
	{1, 1, &partitionpb.EntityConfig{EntityId: 1, Partition: 1, Name: "q1", LockDurationMs: 10_000, MaxDeliveryCount: 3, DefaultTtlMs: 30_000, DeadLetteringOnExpiration: true}},
	{2, 0, &partitionpb.EntityConfig{EntityId: 2, Partition: 0, Name: "q2", LockDurationMs: 5_000, MaxDeliveryCount: 2, MaxSizeBytes: 4000,
		RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 20_000}},
	// A topic fanned out to two subscriptions (fanout.go): one message may
	// get two copies in sub 11 (both its rules match id 7).
	{10, 0, &partitionpb.EntityConfig{EntityId: 10, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC,
		RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 20_000}},
	{11, 0, &partitionpb.EntityConfig{EntityId: 11, Name: "t/Subscriptions/a", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		TopicId: 10, LockDurationMs: 10_000, MaxDeliveryCount: 3, Rules: []*placementpb.Rule{
			{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}},
			{Name: "seven", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{MessageId: "7"}}},
		}}},
	{12, 0, &partitionpb.EntityConfig{EntityId: 12, Name: "t/Subscriptions/b", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		TopicId: 10, DefaultTtlMs: 15_000, Rules: []*placementpb.Rule{
			{Name: "ones", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "sys.MessageId LIKE '1%'"}},
				Action: &placementpb.SqlRuleAction{Expression: "SET sys.Label = 'one'; SET k = newid()"}},
		}}},
}

// altRules are other rules for workloadEntities' subscriptions, which
// their upserts take now and then.
var altRules = map[uint64][]*placementpb.Rule{
	11: {{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}}},
	12: {{Name: "twos", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "sys.MessageId LIKE '2%'"}},
		Action: &placementpb.SqlRuleAction{Expression: "SET sys.Label = 'two'"}}},
}

// randomLog drives a machine with a random mix of every command and returns
// the entries and the machine's results. Tokens for settles come from
// earlier results, so many are stale.
func randomLog(t *testing.T, seed uint64, n int) (*pt.Driver, [][]*partitionpb.Result) {
	rng := rand.New(rand.NewPCG(seed, seed))
	d := pt.NewDriver(t, 1_000_000)
	var results [][]*partitionpb.Result
	var cmds []*partitionpb.Command
	for _, e := range workloadEntities {
		cmds = append(cmds, pt.Upsert(e.cfg))
	}
	results = append(results, d.Apply(cmds...))
	var retried []*partitionpb.Command
	blobs := uint64(0) // staged blob ids
	tokens := map[int][]struct {
		tok []byte
		sub partitionpb.SubQueue
	}{}
	for range n {
		d.Now += rng.Int64N(4000)
		var cmds []*partitionpb.Command
		for range 1 + rng.IntN(4) {
			ei := rng.IntN(len(workloadEntities))
			e := workloadEntities[ei]
			sub := main
			if rng.IntN(4) == 0 {
				sub = dlq
			}
			switch k := rng.IntN(100); {
			case k < 30:
				var ms []*partitionpb.NewMessage
				for range 1 + rng.IntN(8) {
					body := make([]byte, rng.IntN(200))
					for i := range body {
						body[i] = byte(rng.Uint32())
					}
					// Ids from a small set, so that duplicates happen.
					m := &partitionpb.NewMessage{MessageId: fmt.Sprint(rng.IntN(40)), Bare: body}
					switch rng.IntN(6) {
					case 0:
						m.TtlMs = 1 + rng.Int64N(20_000)
					case 1:
						m.ScheduledEnqueueTimeMs = d.Now + rng.Int64N(60_000)
					case 2:
						// Forwarded, origins from a small set so that a
						// forwarder's resends happen (forward.go).
						m.Forwarded = &partitionpb.ForwardOrigin{EntityId: 99, SequenceNumber: uint64(rng.IntN(30)),
							SubQueue: partitionpb.SubQueue(rng.IntN(2)), Hops: uint32(1 + rng.IntN(4)), DeadLetterReason: "r"}
					}
					if e.cfg.Kind == placementpb.EntityKind_ENTITY_KIND_TOPIC {
						m.FilterView = &partitionpb.FilterView{} // as a front-end or forwarder sends
						if rng.IntN(5) == 0 {
							// Staged in chunks, its blob shared by the
							// copies (sharedblobs.go).
							blobs++
							stage, sm := pt.Stage(e.id, e.part, binary.BigEndian.AppendUint64(make([]byte, 8), blobs), body, 64)
							cmds = append(cmds, stage...)
							m.Bare, m.StagedBody, m.StagedLength, m.StagedCrc = nil, sm.StagedBody, sm.StagedLength, sm.StagedCrc
						}
					}
					ms = append(ms, m)
				}
				cmds = append(cmds, pt.Enqueue(e.id, e.part, ms...))
			case k < 55:
				if rng.IntN(5) == 0 {
					cmds = append(cmds, pt.ReceiveAndDelete(e.id, e.part, sub, uint32(1+rng.IntN(3))))
				} else {
					cmds = append(cmds, pt.Lock(e.id, e.part, sub, uint32(1+rng.IntN(5)), rng.Uint64()))
				}
			case k < 85, k < 93 && rng.IntN(2) == 0:
				known := tokens[ei]
				if len(known) == 0 {
					continue
				}
				var toks [][]byte
				sub := known[rng.IntN(len(known))].sub
				for range 1 + rng.IntN(3) {
					if c := known[len(known)-1-rng.IntN(min(len(known), 8))]; c.sub == sub {
						toks = append(toks, c.tok)
					}
				}
				if k < 85 {
					s := &partitionpb.Settle{EntityId: e.id, Partition: e.part, SubQueue: sub,
						Disposition: partitionpb.Disposition(rng.IntN(5)), LockTokens: toks,
						DeadLetterReason: "r", DeadLetterDescription: "d"}
					if rng.IntN(3) == 0 {
						s.PropertiesToModify = []byte{byte(rng.Uint32())}
					}
					cmds = append(cmds, pt.SettleCmd(s))
				} else {
					cmds = append(cmds, pt.Renew(e.id, e.part, sub, toks...))
				}
			case k < 97:
				// A sequence number that often names a message.
				seq := func() uint64 { return uint64(e.part)<<48 | (1 + rng.Uint64N(150)) }
				switch rng.IntN(7) {
				case 5: // admin: purge a few, or re-drive (issue 23)
					cmds = append(cmds, pt.Purge(e.id, e.part, sub, seq(), uint32(1+rng.IntN(4))))
				case 6:
					filter := ""
					if rng.IntN(2) == 0 {
						filter = "sys.DeliveryCount > 1"
					}
					cmds = append(cmds, pt.Redrive(e.id, e.part, filter, seq(), seq(), seq()))
				case 0:
					cmds = append(cmds, pt.ExpireLocks())
				case 1:
					cmds = append(cmds, pt.ActivateScheduled())
				case 2:
					cmds = append(cmds, pt.ExpireMessages())
				case 3:
					cmds = append(cmds, pt.CancelScheduled(e.id, e.part, seq(), seq(), seq()))
				default:
					l := &partitionpb.LockBySequence{EntityId: e.id, Partition: e.part, SubQueue: sub,
						SequenceNumbers: []uint64{seq(), seq(), seq(), seq()}, TokenSeed: pt.Seed(rng.Uint64())}
					if rng.IntN(4) == 0 {
						l.ReceiveAndDelete, l.TokenSeed = true, nil
					}
					cmds = append(cmds, pt.LockBySequence(l))
				}
			case k < 98:
				if rng.IntN(4) == 0 { // versioned or not, in and out of order
					cmds = append(cmds, pt.DeleteCmd(&partitionpb.DeleteEntity{EntityId: e.id, Partition: e.part,
						Version: uint64(rng.IntN(2)) * uint64(d.Now-rng.Int64N(10_000))}))
				}
			default:
				cfg := proto.Clone(e.cfg).(*partitionpb.EntityConfig)
				cfg.Version = uint64(rng.IntN(2)) * uint64(d.Now-rng.Int64N(10_000))
				if alt, ok := altRules[e.id]; ok && rng.IntN(2) == 0 {
					// The rules change: plans made before are stale.
					cfg.Rules = alt
				}
				cmds = append(cmds, pt.Upsert(cfg))
			}
		}
		// Request ids from a small set, and now and then the previous
		// entry's requests again, as a front-end retrying sends them.
		for _, c := range cmds {
			peekLock := c.GetLock() != nil && !c.GetLock().ReceiveAndDelete ||
				c.GetLockBySequence() != nil && !c.GetLockBySequence().ReceiveAndDelete
			if (c.GetEnqueue() != nil || c.GetSettle() != nil || peekLock) && rng.IntN(3) == 0 {
				c.RequestId = []byte(fmt.Sprint("req", rng.IntN(30)))
			}
		}
		if rng.IntN(6) == 0 {
			cmds = append(cmds, retried...)
		}
		retried = retried[:0]
		for _, c := range cmds {
			if len(c.RequestId) > 0 {
				retried = append(retried, c)
			}
		}
		res := d.Apply(cmds...)
		results = append(results, res)
		for i, c := range cmds {
			var id uint64
			var part uint32
			var lsub partitionpb.SubQueue
			if l := c.GetLock(); l != nil {
				id, part, lsub = l.EntityId, l.Partition, l.SubQueue
			} else if l := c.GetLockBySequence(); l != nil {
				id, part, lsub = l.EntityId, l.Partition, l.SubQueue
			} else {
				continue
			}
			ei := entityIndex(id, part)
			for _, m := range res[i].Messages {
				if len(m.LockToken) > 0 {
					tokens[ei] = append(tokens[ei], struct {
						tok []byte
						sub partitionpb.SubQueue
					}{m.LockToken, lsub})
				}
			}
		}
	}
	return d, results
}

func entityIndex(id uint64, part uint32) int {
	for i, e := range workloadEntities {
		if e.id == id && e.part == part {
			return i
		}
	}
	panic("unknown entity")
}

// TestDeterminism feeds the same entries to machines in different
// chunkings, one of them restarted midway and fed overlapping entries
// again: results and snapshots must be identical.
func TestDeterminism(t *testing.T) {
	skipUnderRace(t)
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a, want := randomLog(t, seed, 300)
			checkCounters(t, a.M)
			codes := map[partitionpb.ResultCode]int{}
			for _, res := range want {
				for _, r := range res {
					codes[r.Code]++
				}
			}
			t.Logf("result codes: %v", codes)
			entries := a.Entries

			b := pt.Open(t)
			rng := rand.New(rand.NewPCG(seed, 99))
			sameResults(t, "b", want, applyInRuns(t, b, entries, rng, nil))
			if err := partition.CompactStore(b); err != nil {
				t.Fatal(err)
			}

			// e reads locked messages from the store, where a (which
			// answered want) and the others keep them in memory too.
			e := pt.Open(t)
			partition.WithoutLockedStates(e)
			sameResults(t, "e", want, applyInRuns(t, e, entries, rng, nil))

			// d keeps bodies in the log (logbodies.go) and snapshots now
			// and then, after which the log below goes.
			l := newFakeLog()
			for _, e := range entries {
				l.add(e)
			}
			d := openWithLog(t, t.TempDir(), l)
			inLog := 0
			sameResults(t, "d", want, applyInRuns(t, d, entries, rng, func() {
				_, n, err := partition.BodyPlaces(d)
				if err != nil {
					t.Fatal(err)
				}
				inLog = max(inLog, n)
				if rng.IntN(4) == 0 {
					s, err := d.Snapshot()
					if err != nil {
						t.Fatal(err)
					}
					s.Release()
					l.truncate(d.AppliedIndex() + 1)
				}
			}))
			if inLog == 0 {
				t.Fatal("d never kept a body in the log")
			}

			// f applies the entries with the plans of a leader
			// (plan.go) whose state was up to seven entries behind, as
			// with entries in flight: stale plans among them.
			f := pt.Open(t)
			sameResults(t, "f", want, applyPlanned(t, f, entries, rng))
			if taken, stale := partition.PlanCounts(f); taken == 0 {
				t.Fatal("f took no plan")
			} else {
				t.Logf("f: %d plans taken, %d stale", taken, stale)
			}

			dir := t.TempDir()
			c := pt.OpenDir(t, dir)
			half := len(entries) / 2
			if _, err := c.Apply(entries[:half]); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = pt.OpenDir(t, dir)
			if _, err := c.Apply(entries[half-10:]); err != nil {
				t.Fatal(err)
			}

			for name, m := range map[string]*partition.Machine{"a": a.M, "b": b, "c": c, "d": d, "e": e, "f": f} {
				if n := partition.Misuse(m); n > 0 {
					t.Errorf("%s: %d single deletes met no write or two", name, n)
				}
			}
			sa := snapshotBytes(t, a.M)
			if !bytes.Equal(sa, snapshotBytes(t, b)) {
				t.Fatal("snapshots of a and b differ")
			}
			if !bytes.Equal(sa, snapshotBytes(t, c)) {
				t.Fatal("snapshots of a and the restarted c differ")
			}
			if !bytes.Equal(sa, snapshotBytes(t, e)) {
				t.Fatal("snapshots of a and e, which kept no locked states in memory, differ")
			}
			if !bytes.Equal(sa, snapshotBytes(t, d)) {
				t.Fatal("snapshots of a and d, which kept bodies in the log, differ")
			}
			if !bytes.Equal(sa, snapshotBytes(t, f)) {
				t.Fatal("snapshots of a and f, which took the leader's plans, differ")
			}
			t.Logf("%d entries, snapshot of %d bytes", len(entries), len(sa))
		})
	}
}

// applyInRuns applies entries to m in runs of 1 to 20 and flushes after
// each, so that m's records meet across tables as a long-lived store's do
// (a single delete that met the wrong write would show in a snapshot),
// then calls after, if given. It returns the results of every entry.
func applyInRuns(t *testing.T, m *partition.Machine, entries []partition.Entry, rng *rand.Rand, after func()) [][]*partitionpb.Result {
	t.Helper()
	var got [][]*partitionpb.Result
	for i := 0; i < len(entries); {
		j := min(len(entries), i+1+rng.IntN(20))
		res, err := m.Apply(entries[i:j])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res...)
		i = j
		if err := partition.FlushStore(m); err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after()
		}
	}
	return got
}

// applyPlanned applies entries to m one by one, each with the plans a
// leader makes of its sends to topics from a state 0 to 7 entries behind
// it (a machine of its own), and returns the results of every entry.
func applyPlanned(t *testing.T, m *partition.Machine, entries []partition.Entry, rng *rand.Rand) [][]*partitionpb.Result {
	t.Helper()
	leader := pt.Open(t)
	var got [][]*partitionpb.Result
	next := 0 // the leader's next entry
	for i, e := range entries {
		for lag := rng.IntN(8); next < i-lag; next++ {
			if _, err := leader.Apply(entries[next : next+1]); err != nil {
				t.Fatal(err)
			}
		}
		b, err := partition.DecodeBatch(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		leader.PlanTopicSends(b)
		data, err := partition.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Apply([]partition.Entry{{Index: e.Index, Data: data}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res...)
	}
	return got
}

// sameResults fails unless replica name answered every command as want.
func sameResults(t *testing.T, name string, want, got [][]*partitionpb.Result) {
	t.Helper()
	for i := range want {
		for k := range want[i] {
			if !proto.Equal(want[i][k], got[i][k]) {
				t.Fatalf("entry %d command %d: results of a and %s differ:\n%v\n%v", i+1, k, name, want[i][k], got[i][k])
			}
		}
	}
}

// recountTopic is what a topic partition's counters must hold
// (topiccounts.go): the topic shares of the copies its subscriptions'
// partitions hold, and its records of scheduled messages.
func recountTopic(t *testing.T, m *partition.Machine, id uint64, part uint32) (size, scheduled uint64) {
	t.Helper()
	for _, s := range workloadEntities {
		if s.cfg.GetTopicId() != id || s.part != part {
			continue
		}
		for _, sub := range []partitionpb.SubQueue{main, dlq} {
			ms, err := partition.Messages(m, s.id, s.part, sub)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range ms {
				size += uint64(msg.TopicShare)
			}
		}
	}
	n, err := partition.TopicScheduledEntries(m, id, part)
	if err != nil {
		t.Fatal(err)
	}
	return size, uint64(n)
}

// checkCounters recounts every entity's messages and compares with Stats.
func checkCounters(t *testing.T, m *partition.Machine) {
	t.Helper()
	for _, e := range workloadEntities {
		s, err := m.Stats(e.id, e.part)
		if err != nil {
			continue // deleted
		}
		// The access time is not a count of messages: it is checked
		// for agreement with the snapshots, not recounted.
		want := partitionpb.StatsResponse{AccessedAtMs: s.AccessedAtMs}
		for _, sub := range []partitionpb.SubQueue{main, dlq} {
			ms, err := partition.Messages(m, e.id, e.part, sub)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range ms {
				switch {
				case sub == dlq:
					want.DeadLetterMessages++
				case msg.State == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED:
					want.ScheduledMessages++
				default:
					want.ActiveMessages++
				}
				if len(msg.LockToken) > 0 {
					want.LockedMessages++
				}
				want.SizeBytes += uint64(len(msg.Bare))
			}
		}
		if e.cfg.GetKind() == placementpb.EntityKind_ENTITY_KIND_TOPIC {
			want.SizeBytes, want.ScheduledMessages = recountTopic(t, m, e.id, e.part)
		}
		if !proto.Equal(s, &want) {
			t.Errorf("%d/%d: stats %v, recounted %v", e.id, e.part, s, &want)
		}
		if err := partition.CheckIndexes(m, e.id, e.part); err != nil {
			t.Error(err)
		}
		if want.ActiveMessages+want.DeadLetterMessages == 0 {
			t.Logf("%d/%d is empty", e.id, e.part)
		}
	}
}

// TestAnsweringReplica applies batches that replica n1 proposed on n1 and
// on n2: only n1 returns message bodies, n2 returns no messages at all for
// a Lock, and both stores are identical to each other and to a machine
// that answers everything.
func TestAnsweringReplica(t *testing.T) {
	a, want := randomLog(t, 7, 300)
	open := func(name string) *partition.Machine {
		opts := pt.Options()
		opts.Replica = name
		m, err := partition.Open(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	n1, n2 := open("n1"), open("n2")
	bodies := 0
	for i, e := range a.Entries {
		b, err := partition.DecodeBatch(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		b.Proposer = "n1"
		data, err := partition.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		e = partition.Entry{Index: e.Index, Data: data}
		r1, err := n1.Apply([]partition.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := n2.Apply([]partition.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		for k := range want[i] {
			if !proto.Equal(want[i][k], r1[0][k]) {
				t.Fatalf("entry %d command %d: the proposer's result differs:\n%v\n%v", i+1, k, want[i][k], r1[0][k])
			}
			stripped := proto.Clone(want[i][k]).(*partitionpb.Result)
			for _, m := range stripped.Messages {
				if len(m.Bare) > 0 {
					bodies++
				}
				m.Header, m.Annotations, m.Bare = nil, nil, nil
			}
			if b.Commands[k].GetLock() != nil {
				stripped.Messages = nil // lockRecord: not even decoded
			}
			if !proto.Equal(stripped, r2[0][k]) {
				t.Fatalf("entry %d command %d: the other replica's result is not the proposer's without bodies:\n%v\n%v", i+1, k, stripped, r2[0][k])
			}
		}
	}
	if bodies == 0 {
		t.Fatal("the log returned no message with a body: the test shows nothing")
	}
	sa := snapshotBytes(t, a.M)
	if !bytes.Equal(sa, snapshotBytes(t, n1)) || !bytes.Equal(sa, snapshotBytes(t, n2)) {
		t.Fatal("snapshots differ")
	}
	t.Logf("%d messages returned with bodies by n1, without by n2", bodies)
}

// skipUnderRace skips a long, CPU-bound test of one goroutine under the
// race detector, which finds nothing there and makes it several times
// slower; make test runs these without -race too (the Makefile's test
// target).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceOn {
		t.Skip("CPU-bound on one goroutine: run without -race (make test does)")
	}
}
