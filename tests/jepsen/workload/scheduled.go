package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// ScheduledConfig drives a plain queue with scheduled sends.
type ScheduledConfig struct {
	Common
	Queue              string
	Senders, Receivers int
	SendRate           float64
	// MaxDelay bounds how far ahead a message is scheduled.
	MaxDelay time.Duration
	Seed     uint64
}

// StartScheduled sends messages with x-opt-scheduled-enqueue-time up to
// MaxDelay ahead (the send invoke records it in AtMs) and receives them;
// each receive records the harness's wall clock in AtMs, for
// checker.Scheduled.
func StartScheduled(ctx context.Context, cfg ScheduledConfig) Runner {
	s := newStream(ctx, cfg.Common, "scheduled")
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		p := 300 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		next := func(n int) (*amqp.Message, history.Op) {
			id := fmt.Sprintf("t%d-%d", p, n)
			at := time.Now().Add(time.Duration(rng.Int64N(int64(cfg.MaxDelay)))).Truncate(time.Millisecond)
			return &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)},
					Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": at}},
				history.Op{Entity: cfg.Queue, MsgID: id, AtMs: at.UnixMilli()}
		}
		s.goSend(func(ctx context.Context) {
			s.sendLoop(ctx, p, cfg.Queue, interval, next, func(inv history.Op) { s.expect(inv.MsgID, 1) })
		})
	}
	for i := range cfg.Receivers {
		s.goRecv(func(ctx context.Context) {
			s.recvLoop(ctx, 350+i, cfg.Queue, cfg.Queue, 10, func(d history.Op) string { return d.MsgID }, nil)
		})
	}
	return s
}
