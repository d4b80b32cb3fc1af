package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// DedupConfig drives a queue created with RequiresDuplicateDetection and
// a window of Window.
type DedupConfig struct {
	Common
	Queue              string
	Window             time.Duration
	Senders, Receivers int
	SendRate           float64
	Seed               uint64
}

// StartDedup sends fresh message ids and resends some of them: soon
// after the first send (well within the window: the broker must drop the
// copy) or once the window has passed (the broker must take it as a new
// message). The checker (checker.Dedup) judges each resend by the times
// the history shows, not by the workload's intent.
func StartDedup(ctx context.Context, cfg DedupConfig) Runner {
	s := newStream(ctx, cfg.Common, "dedup")
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		p := 200 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		var pending []resend
		first := map[string]time.Time{} // acknowledged first sends
		next := func(n int) (*amqp.Message, history.Op) {
			id := fmt.Sprintf("d%d-%d", p, n)
			if len(pending) > 0 && !time.Now().Before(pending[0].due) {
				id, pending = pending[0].id, pending[1:]
			} else {
				switch r := rng.Float64(); {
				case r < 0.3:
					pending = append(pending, resend{id, time.Now().Add(time.Duration(rng.Int64N(int64(3 * time.Second))))})
				case r < 0.4:
					pending = append(pending, resend{id, time.Now().Add(cfg.Window + 8*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))))})
				}
				slices.SortFunc(pending, func(a, b resend) int { return a.due.Compare(b.due) })
			}
			return &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)}},
				history.Op{Entity: cfg.Queue, MsgID: id}
		}
		acked := func(inv history.Op) {
			if t, ok := first[inv.MsgID]; ok {
				// A resend the broker must take as new once the window
				// (with a margin for the broker's own stamp) has passed.
				if time.Since(t) > cfg.Window+2*time.Second {
					s.expect(inv.MsgID, 2)
				}
				return
			}
			first[inv.MsgID] = time.Now()
			s.expect(inv.MsgID, 1)
		}
		s.goSend(func(ctx context.Context) { s.sendLoop(ctx, p, cfg.Queue, interval, next, acked) })
	}
	for i := range cfg.Receivers {
		s.goRecv(func(ctx context.Context) {
			s.recvLoop(ctx, 250+i, cfg.Queue, cfg.Queue, 10, func(d history.Op) string { return d.MsgID }, nil)
		})
	}
	return s
}

// resend is a message id to send again once due.
type resend struct {
	id  string
	due time.Time
}
