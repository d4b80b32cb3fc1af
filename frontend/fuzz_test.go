package frontend

import (
	"bytes"
	"errors"
	"testing"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// FuzzIncoming: whatever a sender's transfer holds, incoming either
// refuses it or turns it into a message that can be delivered, also from
// the dead-letter queue: rendering it for a receiver succeeds and splits
// into sections again.
func FuzzIncoming(f *testing.F) {
	for _, m := range []amqp.Message{
		{Data: [][]byte{[]byte("hello")}},
		{Properties: &amqp.Properties{MessageID: "id-1", GroupID: "s"}, ApplicationProperties: amqp.Map{{Key: "k", Value: int64(1)}}, Value: "v", HasValue: true},
		{Header: &amqp.Header{Durable: true, TTL: 1000}, DeliveryAnnotations: amqp.Map{{Key: amqp.Symbol("x"), Value: "y"}},
			MessageAnnotations: amqp.Map{{Key: annPartitionKey, Value: "pk"}}, Sequence: [][]any{{int64(1), "two"}}},
	} {
		enc, err := m.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		nm, err := incoming(payload)
		if err != nil {
			return
		}
		stored := &partitionpb.Message{SequenceNumber: 1, Header: nm.Header, Annotations: nm.Annotations, Bare: nm.Bare}
		out, err := outgoing(nil, stored, true)
		if err != nil {
			t.Fatalf("incoming accepted % x but it cannot be delivered: %v", payload, err)
		}
		if _, err := amqp.Sections(out, nil); err != nil {
			t.Fatalf("delivered form % x of % x does not split: %v", out, payload, err)
		}
		// Dead-lettered, its application-properties are decoded and
		// rewritten.
		stored.SubQueue, stored.DeadLetterReason = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, "r"
		if _, err := outgoing(nil, stored, true); err != nil {
			t.Fatalf("incoming accepted % x but dead-lettered it cannot be delivered: %v", payload, err)
		}
		// Sent to a topic, the same message is accepted as it is, with
		// a FilterView whose every value is one a filter reads.
		tm, err := incomingFor(payload, true)
		if err != nil {
			t.Fatalf("incoming accepted % x for a queue, not for a topic: %v", payload, err)
		}
		if tm.FilterView == nil || !bytes.Equal(tm.Header, nm.Header) || !bytes.Equal(tm.Annotations, nm.Annotations) {
			t.Fatalf("for a topic, % x becomes %v, for a queue %v", payload, tm, nm)
		}
		for k, v := range tm.FilterView.Properties {
			if v.GetValue() == nil {
				t.Fatalf("filter view of % x: property %q without a value", payload, k)
			}
		}
		// A rule's action that sets what the view holds and removes a
		// property: the copy can still be delivered.
		stored.ActionSet, stored.ActionRemoved = tm.FilterView, []string{"k"}
		if _, err := outgoing(nil, stored, true); err != nil {
			t.Fatalf("incoming accepted % x but changed by an action it cannot be delivered: %v", payload, err)
		}
	})
}

// FuzzManagementFields: reading a $management request's fields never
// panics, and an integer field is either in its range or an error.
func FuzzManagementFields(f *testing.F) {
	for _, body := range []amqp.Map{
		{{Key: "from-sequence-number", Value: int64(5)}, {Key: "message-count", Value: int32(10)}},
		{{Key: "from-sequence-number", Value: "zero"}, {Key: "message-count", Value: int32(-1)}},
		{{Key: "lock-tokens", Value: []amqp.UUID{{1}}}, {Key: "deadletter-reason", Value: int64(3)}},
		{{Key: "sequence-numbers", Value: []int64{1, 2}}, {Key: "receiver-settle-mode", Value: uint32(1)}},
	} {
		enc, err := (&amqp.Message{Value: body, HasValue: true}).Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var m amqp.Message
		if m.Decode(payload) != nil {
			return
		}
		body, ok := m.Value.(amqp.Map)
		if !ok {
			return
		}
		for _, key := range []string{"from-sequence-number", "message-count", "receiver-settle-mode"} {
			n, err := intField(body, key, 1, 1000)
			if err == nil && (n < 1 || n > 1000) {
				t.Fatalf("%s read as %d, outside [1, 1000]", key, n)
			}
		}
		for _, key := range []string{"deadletter-reason", "deadletter-description"} {
			if _, err := stringField(body, key); err != nil && errors.Unwrap(err) != nil {
				t.Fatalf("%s: unexpected wrapped error %v", key, err)
			}
		}
		lockTokens(body)
		sequenceNumbers(body)
	})
}
