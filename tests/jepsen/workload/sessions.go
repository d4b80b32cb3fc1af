package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// SessionConfig drives a queue created with RequiresSession.
type SessionConfig struct {
	Common
	Queue string
	// Sessions are spread over the senders; each session is sent by one
	// sender, one message at a time, so its acknowledged messages have an
	// order the receivers must keep.
	Sessions           int
	Senders, Receivers int
	SendRate           float64
	Seed               uint64
}

// SessionMessageID names message k of a session; checker.SessionOrder
// reads k back.
func SessionMessageID(session string, k int) string { return fmt.Sprintf("%s-%06d", session, k) }

const sessionFilter = "com.microsoft:session-filter"

// StartSessions: senders send to their sessions in turn; receivers
// accept the next available session (recorded as accept-session, with
// the holding's name in Attrs["holding"]), receive and complete its
// messages, and give it back after it ran dry or after a few seconds.
func StartSessions(ctx context.Context, cfg SessionConfig) Runner {
	s := newStream(ctx, cfg.Common, "sessions")
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		p := 600 + i
		var mine []string
		for j := i; j < cfg.Sessions; j += cfg.Senders {
			mine = append(mine, fmt.Sprintf("ss%d", j))
		}
		k := map[string]int{}
		next := func(n int) (*amqp.Message, history.Op) {
			sess := mine[n%len(mine)]
			k[sess]++
			id := SessionMessageID(sess, k[sess])
			return &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id, GroupID: &sess}, Data: [][]byte{[]byte(id)}},
				history.Op{Entity: cfg.Queue, MsgID: id, SessionID: sess}
		}
		s.goSend(func(ctx context.Context) {
			s.sendLoop(ctx, p, cfg.Queue, interval, next, func(inv history.Op) { s.expect(inv.MsgID, 1) })
		})
	}
	for i := range cfg.Receivers {
		p := 650 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		s.goRecv(func(ctx context.Context) { s.sessionReceiver(ctx, p, cfg.Queue, rng) })
	}
	return s
}

func (s *stream) sessionReceiver(ctx context.Context, p int, queue string, rng *rand.Rand) {
	var l *link
	var m *mgmt // the connection's $management links, for the session's state
	defer func() { l.close() }()
	for n := 1; ctx.Err() == nil; n++ {
		if l == nil {
			var err error
			if l, err = dialLink(ctx, s.Dial); err == nil {
				m, err = newMgmt(ctx, l, queue)
			}
			if err != nil {
				l.close()
				l = nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		holding := fmt.Sprintf("p%d-h%d", p, n)
		attrs := map[string]string{"holding": holding}
		s.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.AcceptSession, Entity: queue, Attrs: attrs})
		actx, cancel := context.WithTimeout(ctx, 8*time.Second)
		rcv, err := l.sess.NewReceiver(actx, queue, &amqp.ReceiverOptions{
			Credit: 5, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr(),
			Filters:    []amqp.LinkFilter{amqp.NewLinkFilter(sessionFilter, 0x137000000C, nil)},
			Properties: map[string]any{"com.microsoft:timeout": uint32(2000)}})
		cancel()
		if err != nil {
			// No session was free (the broker says so with a timeout
			// detach), or the connection broke: nothing is held either way.
			s.Rec.Add(history.Op{Process: p, Type: history.Fail, F: history.AcceptSession, Entity: queue, Attrs: attrs, Err: err.Error()})
			l.close()
			l = nil
			pause(ctx, 100*time.Millisecond)
			continue
		}
		sess, _ := rcv.LinkSourceFilterValue(sessionFilter).(string)
		s.Rec.Add(history.Op{Process: p, Type: history.OK, F: history.AcceptSession, Entity: queue, SessionID: sess, Attrs: attrs})
		st := &sessionState{s: s, p: p, queue: queue, sess: sess, m: m}
		if !st.get(ctx) || !s.drainSession(ctx, p, queue, sess, attrs, rcv, st, time.Now().Add(time.Duration(2+rng.IntN(6))*time.Second)) {
			l.close()
			l = nil
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = rcv.Close(cctx)
		cancel()
		if err != nil {
			l.close()
			l = nil
		}
	}
}

// drainSession receives and completes a held session's messages until it
// runs dry or until, and after each complete the broker accepted sets the
// session's state to the message's id; it returns false when the
// connection is in doubt.
func (s *stream) drainSession(ctx context.Context, p int, queue, sess string, attrs map[string]string, rcv *amqp.Receiver, st *sessionState, until time.Time) bool {
	for ctx.Err() == nil && time.Now().Before(until) {
		s.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.Receive, Entity: queue, SessionID: sess, Attrs: attrs})
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := rcv.Receive(rctx, nil)
		empty := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			s.Rec.Add(history.Op{Process: p, Type: history.Fail, F: history.Receive, Entity: queue, SessionID: sess, Attrs: attrs, Err: err.Error()})
			return empty
		}
		d := delivery(m)
		d.Process, d.Type, d.F, d.Entity, d.SessionID, d.Attrs = p, history.OK, history.Receive, queue, sess, attrs
		if m.Properties != nil && m.Properties.GroupID != nil {
			d.SessionID = *m.Properties.GroupID
		}
		d.AtMs = time.Now().UnixMilli()
		s.Rec.Add(d)
		s.arrived(d.MsgID, d.Seq)
		switch s.completed(ctx, p, queue, d, rcv, m) {
		case history.Info:
			return false
		case history.Fail:
			// The session lock is lost: the holding is over. Messages the
			// link received under it before (prefetched) are the next
			// holder's now; reading them on would record deliveries the
			// broker made while the lock was still held as if made
			// after (a false P13).
			return true
		case history.OK:
			if !st.set(ctx, d.MsgID) {
				return false
			}
		}
	}
	return true
}

// sessionState reads and writes the state of a held session through the
// connection's $management links, recording each call (checker.SessionState
// judges them as a register per session).
type sessionState struct {
	s     *stream
	p     int
	queue string
	sess  string
	m     *mgmt
}

// get reads the state; it returns false when the connection is in doubt.
func (st *sessionState) get(ctx context.Context) bool {
	res, done := st.call(ctx, history.GetState, "com.microsoft:get-session-state", map[string]any{"session-id": st.sess}, "")
	if done.Type == history.OK {
		v, _ := res["session-state"].([]byte)
		done.Attrs = map[string]string{"state": string(v)}
	}
	st.s.Rec.Add(done)
	return done.Type != history.Info
}

// set writes the state; it returns false when the connection is in doubt.
func (st *sessionState) set(ctx context.Context, v string) bool {
	_, done := st.call(ctx, history.SetState, "com.microsoft:set-session-state",
		map[string]any{"session-id": st.sess, "session-state": []byte(v)}, v)
	st.s.Rec.Add(done)
	return done.Type != history.Info
}

// call records the invoke and makes the request; the caller records the
// completion it returns. An answer that the request was refused (the
// session lock lost, 410, or another 4xx but a timeout) is a fail: the
// broker did not act; a timeout or a server error leaves it unknown.
func (st *sessionState) call(ctx context.Context, f, op string, body map[string]any, written string) (map[string]any, history.Op) {
	inv := history.Op{Process: st.p, Type: history.Invoke, F: f, Entity: st.queue, SessionID: st.sess}
	if f == history.SetState {
		inv.Attrs = map[string]string{"state": written}
	}
	st.s.Rec.Add(inv)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.s.OpTimeout)
	res, err := st.m.call(cctx, op, "", body)
	cancel()
	done := inv
	done.Type = history.OK
	if err != nil {
		done.Type, done.Err = mgmtOutcome(err), err.Error()
	}
	return res, done
}
