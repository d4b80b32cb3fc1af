package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// seedBatches are real batches of every command.
func seedBatches() []*partitionpb.Batch {
	stages, staged := pt.Stage(1, 0, make([]byte, partition.BlobIDBytes), []byte("a bare message"), 8)
	staged.MessageId = "staged"
	return []*partitionpb.Batch{
		{NowMs: 3000, Commands: append(stages, pt.Enqueue(1, 0, staged))}, // format 4
		{NowMs: 4000, Commands: []*partitionpb.Command{ // format 5
			pt.Upsert(pt.SessionQueue(2, 0, "sq")), pt.Enqueue(2, 0, pt.SessionMsg("s", "m")),
			pt.Accept(2, 0, "s", pt.SessionToken(1)), pt.Accept(2, 0, "", pt.SessionToken(2)),
			pt.LockSession(2, 0, "s", pt.SessionToken(1), 3, 4), pt.RenewSession(2, 0, "s", pt.SessionToken(1)),
			pt.SetState(2, 0, "s", pt.SessionToken(1), []byte("state")), pt.Release(2, 0, "s", pt.SessionToken(1)),
			pt.ExpireSessionLocks(),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 2, SequenceNumbers: []uint64{1}, TokenSeed: pt.Seed(3), SessionId: "s", SessionToken: pt.SessionToken(1)}),
		}},
		{},
		{NowMs: 6000, Commands: []*partitionpb.Command{ // admin (issue 23)
			pt.Purge(1, 0, dlq, 5, 10),
			pt.PurgeCmd(&partitionpb.Purge{EntityId: 1, BeforeEnqueuedTimeMs: 6000, MaxCount: 1}),
			pt.Redrive(1, 0, "DeadLetterReason = 'r'", 1, 2),
			pt.RedriveCmd(&partitionpb.Redrive{EntityId: 1, Candidates: []*partitionpb.RedriveCandidate{{SequenceNumber: 3, View: &partitionpb.FilterView{Subject: "s"}}}}),
		}},
		{NowMs: 1000, Commands: []*partitionpb.Command{pt.Upsert(pt.Queue(1, 2, "q")), pt.Delete(1, 2)}},
		{NowMs: -1, Commands: []*partitionpb.Command{pt.Enqueue(1, 0, pt.Msg("hello"), &partitionpb.NewMessage{
			MessageId: "id", SessionId: "s", PartitionKey: "k", TtlMs: 5, ScheduledEnqueueTimeMs: 9,
			Header: []byte{0x00, 0x53, 0x70}, Annotations: []byte{1}, Bare: []byte{2, 3},
		})}},
		// A forwarded send to a topic, with its view (format 7).
		{NowMs: 8000, Commands: []*partitionpb.Command{pt.Enqueue(10, 0, &partitionpb.NewMessage{
			MessageId: "f", Bare: []byte{4},
			FilterView: &partitionpb.FilterView{Subject: "s", Properties: map[string]*placementpb.RuleValue{
				"n": {Value: &placementpb.RuleValue_LongValue{LongValue: 3}}}},
			Forwarded: &partitionpb.ForwardOrigin{EntityId: 7, SequenceNumber: 9, Hops: 2, ModifiedProperties: [][]byte{{0xc1}},
				ActionSet: &partitionpb.FilterView{To: "x"}},
		})}},
		// A send to a topic whose view has every kind of value.
		{NowMs: 8000, Commands: []*partitionpb.Command{pt.Enqueue(10, 0, &partitionpb.NewMessage{
			MessageId: "v", Bare: []byte{5},
			FilterView: &partitionpb.FilterView{CorrelationId: "c", To: "t", ReplyTo: "r", Subject: "s", ContentType: "ct", ReplyToSessionId: "rs",
				Properties: map[string]*placementpb.RuleValue{
					"s": {Value: &placementpb.RuleValue_StringValue{StringValue: "red"}},
					"e": {Value: &placementpb.RuleValue_StringValue{}},
					"l": {Value: &placementpb.RuleValue_LongValue{LongValue: -3}},
					"d": {Value: &placementpb.RuleValue_DoubleValue{DoubleValue: 2.5}},
					"b": {Value: &placementpb.RuleValue_BoolValue{BoolValue: true}},
					"f": {Value: &placementpb.RuleValue_BoolValue{}},
					"t": {Value: &placementpb.RuleValue_TimestampMs{TimestampMs: 1 << 41}},
					"u": {Value: &placementpb.RuleValue_DurationMs{DurationMs: 60000}},
					"":  {Value: &placementpb.RuleValue_LongValue{}},
				}},
		})}},
		// A send to a topic with the leader's plan (plan.go).
		{NowMs: 9000, Commands: []*partitionpb.Command{pt.Enqueue(10, 0,
			&partitionpb.NewMessage{MessageId: "p", Bare: []byte{6}, FilterView: &partitionpb.FilterView{}}, &partitionpb.NewMessage{Bare: []byte{7}})},
			TopicPlans: []*partitionpb.TopicPlan{{Fingerprint: 1 << 63, NowMs: 9000, Matched: [][]byte{{0x05}, {}}, Evaluate: []uint32{1}}}},
		{NowMs: 1 << 40, Commands: []*partitionpb.Command{pt.Lock(1, 0, dlq, 5, 7), pt.ReceiveAndDelete(1, 0, main, 1)}},
		{Commands: []*partitionpb.Command{
			pt.SettleCmd(&partitionpb.Settle{EntityId: 1, Disposition: deadLetter, LockTokens: [][]byte{make([]byte, 16)},
				DeadLetterReason: "r", DeadLetterDescription: "d", PropertiesToModify: []byte{0xc1}}),
			pt.Renew(1, 0, main, make([]byte, 16)), pt.ExpireLocks(), {},
		}},
		{NowMs: 7000, Commands: []*partitionpb.Command{ // format 2
			{Op: pt.Enqueue(1, 0, pt.Msg("once")).Op, RequestId: []byte("req-1")},
			{Op: pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, make([]byte, 16)).Op, RequestId: []byte("req-2")},
			pt.DeleteCmd(&partitionpb.DeleteEntity{EntityId: 1, Version: 12}),
		}},
		{NowMs: 5000, Commands: []*partitionpb.Command{
			pt.ActivateScheduled(), pt.ExpireMessages(), pt.CancelScheduled(1, 0, 1, 2, 1<<48|3),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, Partition: 1, SubQueue: dlq, SequenceNumbers: []uint64{7, 7}, TokenSeed: pt.Seed(9)}),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}, ReceiveAndDelete: true}),
		}},
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range seedBatches() {
		data, err := partition.EncodeBatch(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path agrees with proto.Unmarshal wherever it decodes.
		if len(data) > 0 {
			if fast, ok := partition.AliasBatch(data[1:]); ok {
				ref := new(partitionpb.Batch)
				if err := proto.Unmarshal(data[1:], ref); err != nil {
					t.Fatalf("the fast path decoded what proto.Unmarshal refuses (%v): %v", err, fast)
				}
				if !proto.Equal(fast, ref) {
					t.Fatalf("the fast path decoded %v, proto.Unmarshal %v", fast, ref)
				}
			}
		}
		b, err := partition.DecodeBatch(data)
		// The apply path's decode, views left in the entry until read,
		// agrees with DecodeBatch.
		lazy, _, lazyErr := partition.DecodeLazily(data)
		if (err == nil) != (lazyErr == nil) || err == nil && !proto.Equal(b, lazy) {
			t.Fatalf("decoded with views left in the entry: %v, %v; DecodeBatch: %v, %v", lazy, lazyErr, b, err)
		}
		if err != nil {
			if !errors.Is(err, partition.ErrMalformed) && !errors.Is(err, partition.ErrUnknownFormat) {
				t.Fatalf("DecodeBatch: unexpected error %v", err)
			}
			return
		}
		// What decodes, re-encodes to something that decodes the same.
		again, err := partition.EncodeBatch(b)
		if err != nil {
			t.Fatalf("EncodeBatch of a decoded batch: %v", err)
		}
		b2, err := partition.DecodeBatch(again)
		if err != nil || !proto.Equal(b, b2) {
			t.Fatalf("round trip: %v, %v != %v", err, b2, b)
		}
	})
}

// Entries as EncodeBatch writes them take the fast path, which decodes
// them as proto.Unmarshal does, with the sections pointing into the entry.
func TestAliasBatch(t *testing.T) {
	for i, b := range seedBatches() {
		data, err := partition.EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		fast, ok := partition.AliasBatch(data[1:])
		if !ok {
			t.Fatalf("batch %d: the fast path gave up on an entry EncodeBatch wrote", i)
		}
		if !proto.Equal(fast, b) {
			t.Fatalf("batch %d: decoded %v, want %v", i, fast, b)
		}
		for _, c := range fast.Commands {
			for _, m := range c.GetEnqueue().GetMessages() {
				if len(m.Bare) == 0 {
					continue
				}
				in := false
				for j := range data {
					in = in || &data[j] == &m.Bare[0]
				}
				if !in || cap(m.Bare) != len(m.Bare) {
					t.Fatalf("batch %d: bare %x is a copy (%v) or open to appends (cap %d)", i, m.Bare, !in, cap(m.Bare))
				}
			}
		}
	}
	// Shapes it leaves to proto.Unmarshal: a repeated scalar, an unknown
	// field, a string that is not UTF-8.
	for _, p := range [][]byte{
		{0x08, 0x01, 0x08, 0x02},
		{0x20, 0x01},
		{0x12, 0x06, 0x1a, 0x04, 0x1a, 0x02, 0x0a, 0x00},
		{0x12, 0x08, 0x1a, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0xff, 0xfe},
	} {
		if b, ok := partition.AliasBatch(p); ok {
			ref := new(partitionpb.Batch)
			if err := proto.Unmarshal(p, ref); err != nil || !proto.Equal(b, ref) {
				t.Fatalf("%x: fast path %v, proto %v (%v)", p, b, ref, err)
			}
		}
	}
}

// FuzzSnapshotStream: any stream either decodes or fails with
// ErrBadSnapshot, and never panics or allocates what a corrupt length
// claims. This is all Restore does before a byte reaches the store; the
// tests in snapshot_test.go cover the rest.
func FuzzSnapshotStream(f *testing.F) {
	d := workload(f)
	f.Add(snapshotBytes(f, d.M))
	f.Add(snapshotBytes(f, pt.Open(f)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, err := partition.ReadSnapshot(bytes.NewReader(data))
		if err != nil && !errors.Is(err, partition.ErrBadSnapshot) {
			t.Fatalf("ReadSnapshot: %v, want ErrBadSnapshot", err)
		}
	})
}

// FuzzNewMessageSections holds the walker that reads a body's sections out
// of a Raft entry to protobuf's decoder: what it accepts, protobuf decodes
// to the same sections (it may accept what protobuf refuses for fields it
// does not read, such as a message id that is not UTF-8: the bytes come
// from an entry whose checksum holds).
func FuzzNewMessageSections(f *testing.F) {
	for _, m := range []*partitionpb.NewMessage{
		{},
		pt.Msg("hello"),
		{MessageId: "id", SessionId: "s", PartitionKey: "k", TtlMs: 5, ScheduledEnqueueTimeMs: -9,
			Header: []byte{0x00, 0x53, 0x70}, Annotations: []byte{1}, Bare: []byte{2, 3}},
		{Header: []byte{}, Bare: bytes.Repeat([]byte{7}, 300)},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x42, 0x01, 0x05, 0x42, 0x00})                   // bare twice: the last wins
	f.Add([]byte{0x30, 0x01})                                     // header as a varint
	f.Add([]byte{0x4d, 0x01, 0x02, 0x03, 0x04})                   // bare as fixed32
	f.Add([]byte{0x9a, 0x01, 0x02, 0x08, 0x01, 0x42, 0x01, 0x09}) // unknown field 19
	f.Fuzz(func(t *testing.T, p []byte) {
		h, an, bare, ok := partition.NewMessageSections(p)
		var nm partitionpb.NewMessage
		err := proto.Unmarshal(p, &nm)
		if !ok {
			return
		}
		if err != nil && !errors.Is(err, proto.Error) {
			t.Fatalf("walker took %x, protobuf failed otherwise: %v", p, err)
		}
		if err != nil {
			// Only a field the walker skips may be what protobuf refused.
			nm.Reset()
			if perr := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(strip(p), &nm); perr != nil {
				return
			}
		}
		for _, c := range []struct {
			name      string
			got, want []byte
		}{{"header", h, nm.Header}, {"annotations", an, nm.Annotations}, {"bare", bare, nm.Bare}} {
			if !bytes.Equal(c.got, c.want) || (c.got == nil) != (c.want == nil) {
				t.Fatalf("%x: %s %x (nil %v), protobuf %x (nil %v)", p, c.name, c.got, c.got == nil, c.want, c.want == nil)
			}
		}
	})
}

// strip keeps the section fields (6-8) of an encoded NewMessage that the
// walker accepted.
func strip(p []byte) []byte {
	var out []byte
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if n < 0 || m < 0 {
			return out
		}
		if num >= 6 && num <= 8 {
			out = append(out, p[:n+m]...)
		}
		p = p[n+m:]
	}
	return out
}

// TestDecodeLazily: the apply path leaves the filter views of sends to
// topics in the entry until a replica reads one, except a view with more
// properties than it checks without decoding, and decodes the same batch
// as DecodeBatch either way.
func TestDecodeLazily(t *testing.T) {
	many := &partitionpb.FilterView{Subject: "s", Properties: map[string]*placementpb.RuleValue{}}
	for i := range 17 {
		many.Properties[fmt.Sprint("p", i)] = &placementpb.RuleValue{Value: &placementpb.RuleValue_LongValue{LongValue: int64(i)}}
	}
	for _, c := range []struct {
		views []*partitionpb.FilterView
		lazy  int
	}{
		{[]*partitionpb.FilterView{{Subject: "s", Properties: map[string]*placementpb.RuleValue{
			"a": {Value: &placementpb.RuleValue_StringValue{StringValue: "x"}}, "": {Value: &placementpb.RuleValue_BoolValue{}}}}, {}}, 2},
		{[]*partitionpb.FilterView{many, {To: "t"}}, 1},
	} {
		var msgs []*partitionpb.NewMessage
		for _, v := range c.views {
			msgs = append(msgs, &partitionpb.NewMessage{Bare: []byte("b"), FilterView: v})
		}
		data, err := partition.EncodeBatch(&partitionpb.Batch{NowMs: 1, Commands: []*partitionpb.Command{pt.Enqueue(10, 0, msgs...)}})
		if err != nil {
			t.Fatal(err)
		}
		want, err := partition.DecodeBatch(data)
		if err != nil {
			t.Fatal(err)
		}
		got, lazy, err := partition.DecodeLazily(data)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("decoded lazily %v, %v; want %v", got, err, want)
		}
		if lazy != c.lazy {
			t.Errorf("%d views left in the entry, want %d", lazy, c.lazy)
		}
	}
}
