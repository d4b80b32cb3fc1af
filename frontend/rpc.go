package frontend

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// Service Bus clients talk to two request/response nodes: $cbs (put-token)
// and <entity>/$management. A client attaches a request link (it sends) and
// a reply link (it receives) on one session and names the reply link's
// address in each request's reply-to.

const (
	cbsNode        = "$cbs"
	managementNode = "$management"
)

// rpcRequest is one decoded request with what is needed to answer it.
type rpcRequest struct {
	msg       amqp.Message
	operation string
	reply     *replyLink
	messageID any
	// counts are the metrics of the entity a $management request is
	// for (metrics.go); nil for $cbs.
	counts *entityCounters
}

// replyLinks keeps the reply links of a connection, per session, so that a
// request finds the link its reply-to names. Only the connection's engine
// goroutine touches it.
type replyLinks struct {
	bySession map[*amqp.Session][]*replyLink
}

func (r *replyLinks) add(rl *replyLink) {
	if r.bySession == nil {
		r.bySession = make(map[*amqp.Session][]*replyLink)
	}
	s := rl.link.Session()
	r.bySession[s] = append(r.bySession[s], rl)
}

func (r *replyLinks) remove(rl *replyLink) {
	s := rl.link.Session()
	links := r.bySession[s]
	for i, x := range links {
		if x == rl {
			links = append(links[:i], links[i+1:]...)
			break
		}
	}
	if len(links) == 0 {
		delete(r.bySession, s)
	} else {
		r.bySession[s] = links
	}
}

// find picks the reply link for a request: the one whose target address or
// name equals reply-to (Go SDK and JS SDK), else any reply link of the same
// node on the session.
func (r *replyLinks) find(s *amqp.Session, node, replyTo string) *replyLink {
	var fallback *replyLink
	for _, rl := range r.bySession[s] {
		a := rl.link.Attach()
		if replyTo != "" && ((a.Target != nil && a.Target.Address == replyTo) || a.Name == replyTo) {
			return rl
		}
		if fallback == nil && a.Source != nil && strings.EqualFold(a.Source.Address, node) {
			fallback = rl
		}
	}
	return fallback
}

// replyLink serves the client's reply link of $cbs or $management. The Go
// SDK sends its first request before it grants credit on the reply link,
// so a response that finds no credit waits for it.
type replyLink struct {
	c       *conn
	link    *amqp.Link
	cbs     bool // counted in conn.cbs
	mu      sync.Mutex
	pending [][]byte
}

// maxPendingReplies bounds responses held for a client that grants no
// credit.
const maxPendingReplies = 1024

func (rl *replyLink) send(payload []byte) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.pending) == 0 {
		// Reply links are sender-settled: a response needs no disposition.
		if _, err := rl.link.Send(nil, payload, true); err != amqp.ErrNoCredit {
			return
		}
	}
	if len(rl.pending) < maxPendingReplies {
		rl.pending = append(rl.pending, payload)
	}
}

// Flow sends the responses held for credit, and answers a drain (AMQP
// 1.0 2.6.7) once none is left to send: the credit that is left is used
// up (the delivery-count advances by it) and a flow tells the client,
// which waits for that flow (rhea, Proton, go-amqp's DrainCredit). A
// response that comes after the drain waits for the next credit. Sends
// hold rl.mu, so none slips in between the last one here and the drain.
func (rl *replyLink) Flow(l *amqp.Link, credit uint32, drain bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for len(rl.pending) > 0 && credit > 0 {
		if _, err := l.Send(nil, rl.pending[0], true); err != nil {
			break
		}
		rl.pending = rl.pending[1:]
		credit--
	}
	if drain {
		l.Drain() // a no-op unless the link's latest flow asked to drain
	}
}

func (rl *replyLink) Detached(*amqp.Link, error) {
	rl.c.replies.remove(rl)
	if rl.cbs {
		rl.c.cbs--
	}
}

func (*replyLink) Disposition(*amqp.Link, uint32, amqp.DeliveryState, bool) {}

// rpcLink is the handler of a request link. Requests are decoded on the
// engine's goroutine and answered by serve, which may do slow work on its
// own goroutine.
type rpcLink struct {
	c     *conn
	node  string // "$cbs" or "<entity>/$management"
	serve func(req *rpcRequest)
	cbs   bool // counted in conn.cbs
}

func (r *rpcLink) Detached(*amqp.Link, error) {
	if r.cbs {
		r.c.cbs--
	}
}

func (r *rpcLink) Message(l *amqp.Link, d *amqp.Delivery) {
	if !d.Settled {
		l.Settle(d.ID, amqp.Accepted{})
	}
	req := &rpcRequest{}
	if err := req.msg.Decode(d.Payload); err != nil {
		r.c.log.Debug("undecodable request", "node", r.node, "err", err)
		return
	}
	replyTo := ""
	if p := req.msg.Properties; p != nil {
		replyTo = p.ReplyTo
		req.messageID = p.MessageID
	}
	if v, ok := req.msg.ApplicationProperties.Get("operation"); ok {
		req.operation, _ = v.(string)
	}
	req.reply = r.c.replies.find(l.Session(), r.node, replyTo)
	if req.reply == nil {
		r.c.log.Debug("request without a reply link", "node", r.node, "reply-to", replyTo)
		return
	}
	r.serve(req)
}

// respond sends the response to a request: status-code (an AMQP int, as the
// SDKs require) and description in the application properties, the request's
// message-id as correlation-id, and body as an amqp-value when not nil.
func (req *rpcRequest) respond(status int32, description string, body any) {
	req.answer(status, description, body, "")
}

// fail answers with f's status and, as Service Bus does, its AMQP
// condition in error-condition (a symbol): the JavaScript SDK builds its
// error from it (a lock lost, a session that cannot be locked), the Go
// SDK from the status code.
func (req *rpcRequest) fail(f failure, detail string) {
	req.answer(f.status, f.describe(detail), nil, f.cond)
}

func (req *rpcRequest) answer(status int32, description string, body any, cond amqp.Symbol) {
	resp := amqp.Message{
		Properties: &amqp.Properties{CorrelationID: req.messageID},
		ApplicationProperties: amqp.Map{
			{Key: "status-code", Value: status},
			{Key: "status-description", Value: description},
		},
	}
	if cond != "" {
		resp.ApplicationProperties = append(resp.ApplicationProperties, amqp.Pair{Key: "error-condition", Value: cond})
	}
	if body != nil {
		resp.Value, resp.HasValue = body, true
	}
	if req.counts != nil {
		req.counts.outcome(1, failure{status: status}, status >= 300)
	}
	payload, err := resp.Append(nil)
	if err != nil {
		return
	}
	req.reply.send(payload)
}

// Token types of put-token: SAS, and Microsoft Entra ID, which we do not
// serve.
const (
	tokenTypeSAS = "servicebus.windows.net:sastoken"
	tokenTypeJWT = "jwt"
)

// serveCBS answers put-token: a valid SAS token grants its claim to the
// connection (202); any other gets 401 with the reason, which the SDKs
// report as unauthorized without retrying.
func (c *conn) serveCBS(req *rpcRequest) {
	if req.operation != "put-token" {
		req.fail(failInvalid, "unknown $cbs operation "+req.operation)
		return
	}
	typ := appString(req.msg.ApplicationProperties, "type")
	switch typ {
	case tokenTypeSAS:
	case tokenTypeJWT:
		req.fail(failNotImpl, "Microsoft Entra ID (jwt) tokens; use a Shared Access Signature")
		return
	default:
		req.fail(failBadField, fmt.Sprintf("token type %q; want %q", truncated(typ), tokenTypeSAS))
		return
	}
	token, ok := req.msg.Value.(string)
	if !ok {
		req.fail(failBadField, fmt.Sprintf("the token must be an amqp-value string, got %s", typeOf(req.msg.Value, req.msg.HasValue)))
		return
	}
	claim, err := c.srv.cfg.Rules.Ruleset().Validate(token, c.amqp.Open().Hostname, time.Now())
	if err != nil {
		// Validation errors name the rule at most, never a key.
		c.log.Debug("put-token refused", "err", err)
		req.fail(failUnauthorized, strings.TrimPrefix(err.Error(), "sas: "))
		return
	}
	if name := appString(req.msg.ApplicationProperties, "name"); name != "" {
		path, err := sas.AudiencePath(name)
		if err != nil || !claim.Covers(path) {
			req.fail(failUnauthorized, fmt.Sprintf("the token's audience does not cover %q", truncated(name)))
			return
		}
	}
	if err := c.auth.grant(claim); err != nil {
		req.fail(failure{amqp.ErrCondResourceLimitExceeded, 403, false, "too many claims"}, err.Error())
		return
	}
	req.respond(202, "Accepted", nil)
}

func appString(m amqp.Map, key string) string {
	v, _ := m.Get(key)
	s, _ := v.(string)
	return s
}

func truncated(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
