package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Messages reads and moves an entity partition's messages through its
// group's leader (frontend/routing.Router implements it). Purge and
// Redrive propose one bounded command each; the loops below make many.
type Messages interface {
	Peek(ctx context.Context, e *placementpb.Entity, req *partitionpb.PeekRequest) ([]*partitionpb.Message, error)
	Purge(ctx context.Context, e *placementpb.Entity, p *partitionpb.Purge) (*partitionpb.Result, error)
	Redrive(ctx context.Context, e *placementpb.Entity, r *partitionpb.Redrive) (*partitionpb.Result, error)
}

// purgeBatch is the messages one Purge command deletes at most: a
// bounded Raft entry however large the entity.
const purgeBatch = 1000

// PurgeOptions say what Purge deletes.
type PurgeOptions struct {
	// DeadLetter purges the dead-letter sub-queue instead of the entity.
	DeadLetter bool
	// Before: only messages enqueued before it; zero: when Purge starts,
	// so that messages sent while it runs are kept.
	Before time.Time
}

// Purge deletes an entity's messages (or its dead-letter queue's), on
// every partition, in bounded commands of purgeBatch. A leader that dies
// between two commands loses nothing: each command deleted its messages
// or did not, and the loop goes on through the next leader (the router
// retries). It returns how many it deleted.
func Purge(ctx context.Context, m Messages, e *placementpb.Entity, opt PurgeOptions) (int, error) {
	if opt.Before.IsZero() {
		opt.Before = time.Now()
	}
	sub := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if opt.DeadLetter {
		sub = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	total := 0
	for p := range e.GetPartitionGroups() {
		var from uint64
		for {
			r, err := m.Purge(ctx, e, &partitionpb.Purge{
				Partition: uint32(p), SubQueue: sub, FromSequenceNumber: from,
				BeforeEnqueuedTimeMs: opt.Before.UnixMilli(), MaxCount: purgeBatch,
			})
			if err == nil {
				err = resultErr(r)
			}
			if err != nil {
				return total, fmt.Errorf("purging %s partition %d after %d messages: %w", e.GetName(), p, total, err)
			}
			total += len(r.GetSequenceNumbers())
			if !r.GetMore() {
				break
			}
			from = r.GetNextSequenceNumber()
		}
	}
	return total, nil
}

// RedriveOptions say which dead-lettered messages Redrive moves, and how
// fast.
type RedriveOptions struct {
	// Filter is a SQL filter (the subscription rule language) the
	// messages must match; empty: all.
	Filter string
	// Max bounds the messages moved; 0: no bound.
	Max int
	// Rate bounds the messages moved per second; 0: DefaultRedriveRate.
	Rate float64
	// Sequence, when set, names the only messages to move (by their
	// sequence numbers in the dead-letter queue): "resend" of one.
	Sequence []uint64
}

// DefaultRedriveRate is the re-drive rate when none is given, in messages
// per second: a re-drive is an operator's repair, not a bulk load, and
// its receivers may be what failed.
const DefaultRedriveRate = 100

// redriveBatch bounds one Redrive command's candidates (and one peek).
const redriveBatch = 250

// candidateBodyBytes is the body a re-drive's peek asks of each
// candidate: a filter reads the properties, which a cut body keeps, and
// the Redrive command moves the message whole inside the partition, so
// the gateway needs none of it (0 would ask for it whole).
const candidateBodyBytes = 1

// Redrive moves dead-lettered messages of an entity back to it, on every
// partition, at most opt.Rate a second. Each Redrive command moves its
// messages in one Raft entry (the copy in the main queue and the removal
// from the dead-letter queue commit together); a retry after a leader
// died skips what the first attempt moved. It returns how many it moved.
func Redrive(ctx context.Context, m Messages, e *placementpb.Entity, opt RedriveOptions) (int, error) {
	if e.GetKind() == placementpb.EntityKind_ENTITY_KIND_TOPIC {
		return 0, fmt.Errorf("%w: %s is a topic, which keeps no messages; re-drive its subscriptions", ErrBadProperty, e.GetName())
	}
	rate := opt.Rate
	if rate <= 0 {
		rate = DefaultRedriveRate
	}
	batch := int(min(redriveBatch, math.Ceil(rate)))
	start := time.Now()
	moved := 0
	left := func() int {
		if opt.Max <= 0 {
			return math.MaxInt
		}
		return opt.Max - moved
	}
	for p := range e.GetPartitionGroups() {
		var from uint64
		for left() > 0 {
			var cands []*partitionpb.RedriveCandidate
			var last uint64
			if opt.Sequence != nil {
				for _, s := range opt.Sequence {
					if partitionpb.PartitionOfSequence(s) == uint32(p) {
						cands = append(cands, &partitionpb.RedriveCandidate{SequenceNumber: s})
					}
				}
			} else {
				msgs, err := m.Peek(ctx, e, &partitionpb.PeekRequest{
					Partition: uint32(p), SubQueue: partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER,
					FromSequenceNumber: from, MaxCount: uint32(min(batch, left())),
					BodyPrefixBytes: candidateBodyBytes,
				})
				if err != nil {
					return moved, fmt.Errorf("re-driving %s partition %d after %d messages: %w", e.GetName(), p, moved, err)
				}
				if len(msgs) == 0 {
					break
				}
				for _, msg := range msgs {
					c := &partitionpb.RedriveCandidate{SequenceNumber: msg.SequenceNumber}
					if opt.Filter != "" {
						// A message whose properties do not decode is
						// judged on its stored fields alone.
						c.View, _ = FilterViewOf(msg.Bare)
					}
					cands = append(cands, c)
					last = msg.SequenceNumber
				}
			}
			if len(cands) > 0 {
				r, err := m.Redrive(ctx, e, &partitionpb.Redrive{Partition: uint32(p), Candidates: cands, SqlFilter: opt.Filter})
				if err == nil {
					err = resultErr(r)
				}
				if err != nil {
					return moved, fmt.Errorf("re-driving %s partition %d after %d messages: %w", e.GetName(), p, moved, err)
				}
				moved += len(r.GetSequenceNumbers())
			}
			if opt.Sequence != nil {
				break
			}
			from = last + 1
			// Pace: no faster than rate since the start.
			if wait := time.Duration(float64(moved)/rate*float64(time.Second)) - time.Since(start); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return moved, ctx.Err()
				}
			}
		}
	}
	return moved, nil
}

// resultErr turns a rejected command's result into an error the gateway's
// table maps (errors.go).
func resultErr(r *partitionpb.Result) error {
	switch r.GetCode() {
	case partitionpb.ResultCode_RESULT_OK:
		return nil
	case partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND:
		return fmt.Errorf("%w: %s", ErrNotFound, r.GetDescription())
	case partitionpb.ResultCode_RESULT_INVALID, partitionpb.ResultCode_RESULT_ENTITY_DISABLED:
		return fmt.Errorf("%w: %s", ErrBadProperty, r.GetDescription())
	}
	return fmt.Errorf("%w: %s: %s", errRejected, r.GetCode(), r.GetDescription())
}

var errRejected = errors.New("gateway: rejected by the partition")

// decodeMessage is go-amqp's UnmarshalBinary, with its panics turned
// into errors: the front-end stores what its own decoder accepts, and
// go-amqp panics on some bytes of that kind (seen by fuzzing); a stored
// message must not bring the gateway down when someone views it or a
// re-drive reads it.
func decodeMessage(m *amqp.Message, bare []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the message does not decode: %v", r)
		}
	}()
	return m.UnmarshalBinary(bare)
}

// FilterViewOf decodes what a re-drive filter reads of a bare message
// (its properties and application properties), as a front-end does for
// a message sent to a topic.
func FilterViewOf(bare []byte) (*partitionpb.FilterView, error) {
	var m amqp.Message
	if err := decodeMessage(&m, bare); err != nil {
		return nil, fmt.Errorf("gateway: decoding a message: %w", err)
	}
	v := &partitionpb.FilterView{}
	if p := m.Properties; p != nil {
		v.CorrelationId = idString(p.CorrelationID)
		v.To, v.ReplyTo, v.Subject = deref(p.To), deref(p.ReplyTo), deref(p.Subject)
		v.ContentType, v.ReplyToSessionId = deref(p.ContentType), deref(p.ReplyToGroupID)
	}
	for k, x := range m.ApplicationProperties {
		if rv := placementpb.PropertyRuleValue(x); rv != nil {
			if v.Properties == nil {
				v.Properties = make(map[string]*placementpb.RuleValue, len(m.ApplicationProperties))
			}
			v.Properties[k] = rv
		}
	}
	return v, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// idString is a message or correlation id as text: Service Bus ids are
// strings; the other AMQP id types are written as Go prints them.
func idString(x any) string {
	switch x := x.(type) {
	case nil:
		return ""
	case string:
		return x
	case amqp.UUID:
		return x.String()
	case []byte:
		return fmt.Sprintf("%x", x)
	}
	return fmt.Sprint(x)
}
