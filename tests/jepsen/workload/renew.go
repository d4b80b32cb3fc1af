package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// RenewConfig drives a queue with a short lock whose receivers hold
// messages longer than the lock and renew it through $management.
type RenewConfig struct {
	Common
	Queue              string
	Lock               time.Duration // the queue's lock duration
	Senders, Receivers int
	SendRate           float64
	Seed               uint64
}

// StartRenew: each receiver takes one message at a time (credit 1),
// holds it for up to two lock durations, renewing every third of one,
// and then completes it. Now and then it holds without renewing past
// the lock, so that the complete must fail. A renew the broker answers
// with lock-lost (410) is recorded as fail; the workload still completes
// afterwards, which must fail too (checker.LockRenew).
func StartRenew(ctx context.Context, cfg RenewConfig) Runner {
	s := newStream(ctx, cfg.Common, "renew")
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		p := 400 + i
		next := func(n int) (*amqp.Message, history.Op) {
			id := fmt.Sprintf("r%d-%d", p, n)
			return &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)}},
				history.Op{Entity: cfg.Queue, MsgID: id}
		}
		s.goSend(func(ctx context.Context) {
			s.sendLoop(ctx, p, cfg.Queue, interval, next, func(inv history.Op) { s.expect(inv.MsgID, 1) })
		})
	}
	for i := range cfg.Receivers {
		p := 450 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		var m *mgmt
		var mlink *link
		hold := func(ctx context.Context, r received) {
			if s.stopped() {
				// The drain: take the backlog at once, not a hold per
				// message (four receivers would need minutes).
				return
			}
			if mlink != r.l { // a new connection: the old links are gone
				m, mlink = nil, r.l
			}
			if m == nil {
				var err error
				if m, err = newMgmt(ctx, r.l, cfg.Queue); err != nil {
					return
				}
			}
			tok, ok := lockTokenUUID(r.m.DeliveryTag)
			if !ok {
				return
			}
			every := cfg.Lock / 3
			if rng.IntN(8) == 0 {
				// Past the lock without renewing: the lock runs out.
				pause(ctx, cfg.Lock+cfg.Lock/2)
				return
			}
			end := time.Now().Add(time.Duration(rng.Int64N(int64(2 * cfg.Lock))))
			for time.Now().Before(end) {
				if !pause(ctx, every) {
					return
				}
				inv := history.Op{Process: p, Type: history.Invoke, F: history.Renew, Entity: cfg.Queue, MsgID: r.d.MsgID, LockToken: r.d.LockToken}
				s.Rec.Add(inv)
				cctx, cancel := context.WithTimeout(ctx, s.OpTimeout)
				_, err := m.call(cctx, "com.microsoft:renew-lock", r.rcv.LinkName(), map[string]any{"lock-tokens": []amqp.UUID{tok}})
				cancel()
				done := inv
				done.Type = history.OK
				if err != nil {
					done.Type, done.Err = history.Info, err.Error()
					if lockLost(err) {
						done.Type = history.Fail
					}
				}
				s.Rec.Add(done)
				if err != nil {
					if !lockLost(err) {
						m = nil // the management links are in doubt
					}
					return
				}
			}
		}
		s.goRecv(func(ctx context.Context) {
			s.recvLoop(ctx, p, cfg.Queue, cfg.Queue, 1, func(d history.Op) string { return d.MsgID },
				func(ctx context.Context, r received) bool {
					hold(ctx, r)
					return s.complete(ctx, p, cfg.Queue, r.d, r.rcv, r.m)
				})
		})
	}
	return s
}

// lockTokenUUID reads a delivery tag as the SDKs do (azservicebus
// lockTokenFromMessageTag): the broker writes the lock token in .NET's
// GUID byte order, and $management requests carry it as an RFC 4122
// uuid, so the first three fields are swapped back.
func lockTokenUUID(tag []byte) (amqp.UUID, bool) {
	var t amqp.UUID
	if len(tag) != len(t) {
		return t, false
	}
	copy(t[:], tag)
	t[0], t[3] = t[3], t[0]
	t[1], t[2] = t[2], t[1]
	t[4], t[5] = t[5], t[4]
	t[6], t[7] = t[7], t[6]
	return t, true
}
