package frontend

import (
	"bytes"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// benchMessage is what an SDK typically sends: an id, a few application
// properties and a 1 KiB body.
func benchMessage(b *testing.B, id any) []byte {
	b.Helper()
	m := amqp.Message{
		Header:                &amqp.Header{Durable: true, Priority: 4},
		MessageAnnotations:    amqp.Map{{Key: annPartitionKey, Value: "pk"}},
		Properties:            &amqp.Properties{MessageID: id, ContentType: "application/json"},
		ApplicationProperties: amqp.Map{{Key: "tenant", Value: "t1"}, {Key: "attempt", Value: int64(1)}},
		Data:                  [][]byte{bytes.Repeat([]byte{'x'}, 1024)},
	}
	enc, err := m.Append(nil)
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

// BenchmarkIncoming: a sent message turned into what a partition stores,
// on the send path of every message.
func BenchmarkIncoming(b *testing.B) {
	for _, bc := range []struct {
		name string
		id   any
	}{{"with-id", "0123456789abcdef0123456789abcdef"}, {"without-id", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			payload := benchMessage(b, bc.id)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := incoming(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOutgoing: a stored message rendered for delivery, on the
// receive path of every message; dead-lettered, its
// application-properties are rewritten.
func BenchmarkOutgoing(b *testing.B) {
	nm, err := incoming(benchMessage(b, "0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	stored := func() *partitionpb.Message {
		return &partitionpb.Message{
			SequenceNumber: 42, EnqueuedTimeMs: now, LockedUntilMs: now + 60_000, DeliveryCount: 1,
			LockToken: bytes.Repeat([]byte{7}, 16),
			Header:    nm.Header, Annotations: nm.Annotations, Bare: nm.Bare,
		}
	}
	dead := stored()
	dead.SubQueue, dead.DeadLetterReason, dead.DeadLetterDescription = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, "reason", "description"
	for _, bc := range []struct {
		name string
		m    *partitionpb.Message
	}{{"peek-lock", stored()}, {"dead-letter", dead}} {
		b.Run(bc.name, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				out, err := outgoing(buf[:0], bc.m, true)
				if err != nil {
					b.Fatal(err)
				}
				buf = out
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}
