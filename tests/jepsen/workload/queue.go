// Package workload drives a queue through go-amqp and records every
// operation in a history: senders of unique message ids, and peek-lock
// receivers that complete what they get.
package workload

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// Config says what to drive and how hard.
type Config struct {
	// Dial opens a TCP connection to the front-end.
	Dial  func(ctx context.Context) (net.Conn, error)
	Queue string
	// Senders and Receivers: each is one process of the history with its
	// own AMQP connection, so a broken connection affects one of them.
	Senders, Receivers int
	// SendRate caps the sends per second of all senders together, so a
	// run's history and drain stay bounded whatever the machine's speed.
	SendRate float64
	// OpTimeout bounds each send and complete: past it the outcome is
	// unknown (info).
	OpTimeout time.Duration
	Rec       *history.Recorder
}

// Queue is a running queue workload.
type Queue struct {
	cfg Config

	stopSends chan struct{}
	sendersWG sync.WaitGroup
	recvWG    sync.WaitGroup
	cancel    context.CancelFunc

	mu       sync.Mutex
	acked    map[string]bool // sends that returned ok
	received map[string]bool // ids some receive returned
	// lastDelivery is when a receive last returned a message.
	lastDelivery time.Time
}

// Start launches the senders and receivers.
func Start(ctx context.Context, cfg Config) *Queue {
	ctx, cancel := context.WithCancel(ctx)
	q := &Queue{cfg: cfg, stopSends: make(chan struct{}), cancel: cancel,
		acked: map[string]bool{}, received: map[string]bool{}}
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		q.sendersWG.Add(1)
		go func() { defer q.sendersWG.Done(); q.sender(ctx, 1+i, interval) }()
	}
	for i := range cfg.Receivers {
		q.recvWG.Add(1)
		go func() { defer q.recvWG.Done(); q.receiver(ctx, 100+i) }()
	}
	return q
}

// StopSends stops the senders and waits for their last sends to end.
func (q *Queue) StopSends() {
	close(q.stopSends)
	q.sendersWG.Wait()
}

// Drain lets the receivers run until every acknowledged send has been
// received and then nothing was delivered for quiet, or until ctx ends;
// it reports how many acknowledged sends are still missing. Then it
// stops the receivers.
//
// The quiet period, longer than the queue's lock, is what lets a
// complete that was acknowledged but lost by the broker show: its
// message comes back once the lock expires, and the checkers see the
// redelivery.
func (q *Queue) Drain(ctx context.Context, quiet time.Duration) (missing int) {
	defer func() { q.cancel(); q.recvWG.Wait() }()
	for {
		missing = q.Missing()
		q.mu.Lock()
		idle := time.Since(q.lastDelivery)
		q.mu.Unlock()
		if missing == 0 && idle >= quiet {
			return 0
		}
		select {
		case <-ctx.Done():
			return missing
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Missing counts acknowledged sends not received yet.
func (q *Queue) Missing() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for id := range q.acked {
		if !q.received[id] {
			n++
		}
	}
	return n
}

func (q *Queue) connect(ctx context.Context) (*link, error) { return dialLink(ctx, q.cfg.Dial) }

func (l *link) close() {
	if l != nil {
		l.conn.Close()
	}
}

// pause waits a moment before a retry, or returns false when ctx ends.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (q *Queue) sender(ctx context.Context, p int, interval time.Duration) {
	var l *link
	var snd *amqp.Sender
	defer func() { l.close() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-q.stopSends:
			return
		case <-tick.C:
		}
		if snd == nil {
			var err error
			if l, err = q.connect(ctx); err == nil {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				snd, err = l.sess.NewSender(actx, q.cfg.Queue, nil)
				cancel()
			}
			if err != nil {
				l.close()
				l, snd = nil, nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		n++
		id := fmt.Sprintf("s%d-%d", p, n)
		q.cfg.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.Send, MsgID: id})
		sctx, cancel := context.WithTimeout(ctx, q.cfg.OpTimeout)
		err := snd.Send(sctx, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)}}, nil)
		cancel()
		if err == nil {
			q.mu.Lock()
			q.acked[id] = true
			q.mu.Unlock()
			q.cfg.Rec.Add(history.Op{Process: p, Type: history.OK, F: history.Send, MsgID: id})
			continue
		}
		q.cfg.Rec.Add(history.Op{Process: p, Type: sendOutcome(err), F: history.Send, MsgID: id, Err: err.Error()})
		// Start afresh: the link or connection may be broken, and a new
		// one finds the current route.
		l.close()
		l, snd = nil, nil
	}
}

// definite lists the AMQP errors after which the broker certainly did not
// take a message. Anything else, a timeout, a detached link, a lost
// connection, or a Raft leadership change behind com.microsoft:timeout,
// leaves the send's effect unknown.
var definite = map[amqp.ErrCond]bool{
	amqp.ErrCondNotFound:            true,
	amqp.ErrCondUnauthorizedAccess:  true,
	amqp.ErrCondMessageSizeExceeded: true,
}

func sendOutcome(err error) history.Type {
	var ae *amqp.Error
	if errors.As(err, &ae) && definite[ae.Condition] {
		return history.Fail
	}
	return history.Info
}

func (q *Queue) receiver(ctx context.Context, p int) {
	var l *link
	var rcv *amqp.Receiver
	defer func() { l.close() }()
	for ctx.Err() == nil {
		if rcv == nil {
			var err error
			if l, err = q.connect(ctx); err == nil {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				// Settle mode second: a complete waits for the broker's
				// answer, so its outcome is known.
				rcv, err = l.sess.NewReceiver(actx, q.cfg.Queue, &amqp.ReceiverOptions{
					Credit: 20, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
				cancel()
			}
			if err != nil {
				l.close()
				l, rcv = nil, nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		q.cfg.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.Receive})
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := rcv.Receive(rctx, nil)
		empty := rctx.Err() != nil && ctx.Err() == nil // read before cancel, which sets it
		cancel()
		if err != nil {
			// Nothing reached this client, so nothing was delivered to
			// it: fail, whatever the cause.
			q.cfg.Rec.Add(history.Op{Process: p, Type: history.Fail, F: history.Receive, Err: err.Error()})
			if !empty {
				// The link or connection broke: start afresh.
				l.close()
				l, rcv = nil, nil
				pause(ctx, 100*time.Millisecond)
			}
			continue
		}
		d := delivery(m)
		d.Process, d.Type, d.F = p, history.OK, history.Receive
		q.cfg.Rec.Add(d)
		q.mu.Lock()
		q.received[d.MsgID] = true
		q.lastDelivery = time.Now()
		q.mu.Unlock()

		q.cfg.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.Complete, MsgID: d.MsgID, LockToken: d.LockToken})
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.cfg.OpTimeout)
		err = rcv.AcceptMessage(cctx, m)
		cancel()
		done := history.Op{Process: p, Type: history.OK, F: history.Complete, MsgID: d.MsgID, LockToken: d.LockToken}
		switch {
		case err == nil:
		case settleRefused(err):
			// The broker answered with a rejected outcome: the lock is
			// lost, the message stays.
			done.Type, done.Err = history.Fail, err.Error()
		default:
			done.Type, done.Err = history.Info, err.Error()
		}
		q.cfg.Rec.Add(done)
		if done.Type == history.Info {
			l.close()
			l, rcv = nil, nil
		}
	}
}

// delivery reads what a message says about its delivery: the id sent,
// the broker's sequence number, the delivery count and the lock token
// (x-opt-lock-token, which the broker also sends as the delivery tag).
func delivery(m *amqp.Message) history.Op {
	var d history.Op
	if m.Properties != nil {
		if id, ok := m.Properties.MessageID.(string); ok {
			d.MsgID = id
		}
	}
	if d.MsgID == "" && len(m.Data) > 0 {
		d.MsgID = string(m.Data[0])
	}
	if seq, ok := m.Annotations["x-opt-sequence-number"].(int64); ok {
		d.Seq = seq
	}
	if m.Header != nil {
		d.DeliveryCount = m.Header.DeliveryCount
	}
	if reason, ok := m.ApplicationProperties["DeadLetterReason"].(string); ok {
		d.Attrs = map[string]string{AttrReason: reason} // from a dead-letter sub-queue
	}
	switch tok := m.Annotations["x-opt-lock-token"].(type) {
	case amqp.UUID:
		d.LockToken = tok.String()
	default:
		d.LockToken = hex.EncodeToString(m.DeliveryTag)
	}
	return d
}
