package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// link is one AMQP connection with a session.
type link struct {
	conn *amqp.Conn
	sess *amqp.Session
}

// dialLink opens a connection to the front-end, logged in with the
// emulator's rule (SASL PLAIN), and a session on it.
func dialLink(ctx context.Context, dial func(ctx context.Context) (net.Conn, error)) (*link, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := dial(dctx)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.NewConn(dctx, nc, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		nc.Close()
		return nil, err
	}
	sess, err := conn.NewSession(dctx, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &link{conn: conn, sess: sess}, nil
}

// mgmt is a request/response pair of links on an entity's $management
// node, as the SDKs open them: a sender to <entity>/$management and a
// receiver from it whose target is the reply-to address the requests
// name, settled on arrival.
type mgmt struct {
	snd  *amqp.Sender
	rcv  *amqp.Receiver
	addr string
	n    int
}

func newMgmt(ctx context.Context, l *link, entity string) (*mgmt, error) {
	addr := entity + "/$management"
	reply := fmt.Sprintf("%s-reply-to-%d", addr, time.Now().UnixNano())
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	snd, err := l.sess.NewSender(actx, addr, nil)
	if err != nil {
		return nil, err
	}
	rcv, err := l.sess.NewReceiver(actx, addr, &amqp.ReceiverOptions{TargetAddress: reply, Credit: 100,
		SettlementMode: amqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		snd.Close(actx)
		return nil, err
	}
	return &mgmt{snd: snd, rcv: rcv, addr: reply}, nil
}

// errStatus is a $management answer other than 2xx.
type errStatus struct {
	code int32
	desc string
}

func (e *errStatus) Error() string { return fmt.Sprintf("status %d: %s", e.code, e.desc) }

// lockLost says whether err is the broker's answer that a lock is gone
// (410), as opposed to an unknown outcome.
func lockLost(err error) bool {
	var es *errStatus
	return errors.As(err, &es) && es.code == 410
}

// mgmtOutcome classifies a $management call's error: fail when the broker
// refused the request (the lock lost, 410, or another 4xx but a timeout),
// so that it certainly did not act; info when the outcome is unknown (no
// answer, a timeout, a server error).
func mgmtOutcome(err error) history.Type {
	var es *errStatus
	if errors.As(err, &es) && es.code >= 400 && es.code < 500 && es.code != 408 {
		return history.Fail
	}
	return history.Info
}

// call sends one request and waits for its answer; the reply link holds
// one request at a time.
func (m *mgmt) call(ctx context.Context, op, linkName string, body map[string]any) (map[string]any, error) {
	m.n++
	id := fmt.Sprintf("req-%d", m.n)
	props := map[string]any{"operation": op, "server-timeout": uint64(5000)}
	if linkName != "" {
		props["associated-link-name"] = linkName
	}
	req := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id, ReplyTo: &m.addr},
		ApplicationProperties: props, Value: body}
	if err := m.snd.Send(ctx, req, nil); err != nil {
		return nil, err
	}
	for {
		resp, err := m.rcv.Receive(ctx, nil)
		if err != nil {
			return nil, err
		}
		if resp.Properties == nil || resp.Properties.CorrelationID != id {
			continue // the answer of an earlier request that timed out
		}
		code, _ := resp.ApplicationProperties["statusCode"].(int32)
		if c, ok := resp.ApplicationProperties["status-code"].(int32); ok {
			code = c
		}
		if code < 200 || code > 299 {
			desc, _ := resp.ApplicationProperties["status-description"].(string)
			if desc == "" {
				desc, _ = resp.ApplicationProperties["statusDescription"].(string)
			}
			return nil, &errStatus{code: code, desc: desc}
		}
		out, _ := resp.Value.(map[string]any)
		return out, nil
	}
}
