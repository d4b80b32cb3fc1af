package frontend

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// Claims-based security. A connection holds claims: one per token a
// client put on $cbs (scope = the token's audience, until the token
// expires), or one for the whole connection after SASL PLAIN with a rule's
// name and key. Every link to an entity, its $management node or a
// sub-queue needs a claim that covers its address with the right the link
// uses; a link whose claims all expire is detached.

// RuleSource supplies the authorization rules tokens and SASL PLAIN logins
// are checked against. It is read on every put-token and login, so that
// rules added, changed or removed in the catalog apply to the next one;
// claims of tokens last until their tokens expire, as on Azure. A SASL
// PLAIN login has no expiry, so it is checked again whenever the rule set
// changes (a new *sas.Ruleset): a deleted rule or a regenerated key ends
// it, and changed rights or scope replace its claim.
type RuleSource interface {
	Ruleset() *sas.Ruleset
}

type staticRules struct{ rs *sas.Ruleset }

func (s staticRules) Ruleset() *sas.Ruleset { return s.rs }

// StaticRules is a RuleSource that never changes.
func StaticRules(rs *sas.Ruleset) RuleSource { return staticRules{rs} }

const (
	// maxClaimsPerConn bounds the claims one connection holds: a client
	// puts one token per audience (two per entity it uses), renewing them
	// in place.
	maxClaimsPerConn = 4096
	// maxCBSLinks bounds the $cbs links of a connection, which are all a
	// connection without a claim may attach; a client needs two.
	maxCBSLinks = 16
	// maxCBSMessageSize bounds a put-token request; tokens are at most
	// sas.MaxTokenLength.
	maxCBSMessageSize = 64 << 10
	// plainRecheckInterval is how often a connection logged in with SASL
	// PLAIN looks whether the rule set changed, to detach the links of a
	// login that no longer holds. Each use (attach, $management
	// operation) looks too, so this bounds only how long attached links
	// outlive their rule.
	plainRecheckInterval = time.Second
)

// plainLogin is the principal of a SASL PLAIN connection: the claim its
// rule gave and what to check it again with. The key itself is not kept.
type plainLogin struct {
	claim sas.Claim
	name  string
	key   [32]byte     // sas.KeyDigest of the key
	rules *sas.Ruleset // the rule set that admitted it
}

// condition the SDKs take as final (Go: Code unauthorized).
var failUnauthorized = failure{amqp.ErrCondUnauthorizedAccess, 401, false, "Unauthorized access"}

// linkNeed is what keeps a link authorized: a claim that covers path with
// rights (any one of them when anyRight is set, as for $management links,
// whose operations each check their own right).
type linkNeed struct {
	path     string
	rights   sas.Rights
	anyRight bool
}

func (n linkNeed) metBy(c sas.Claim, now time.Time) bool {
	if c.Expired(now) || !c.Covers(n.path) {
		return false
	}
	if n.anyRight {
		return c.Rights&n.rights != 0
	}
	return c.Rights.Has(n.rights)
}

// authz is the claims of one connection. put-token and attaches run on
// the engine's goroutine, expiry on a timer's and management operations
// on their own, hence the lock.
type authz struct {
	c *conn

	mu       sync.Mutex
	claims   map[string]sas.Claim // by scope and rule
	links    map[*amqp.Link]linkNeed
	timer    *time.Timer // fires at the earliest expiry of a claim
	timerAt  time.Time
	everHeld bool // a claim was granted once: the presentation deadline is met
	closed   bool
	deadline *time.Timer // closes a connection that presents no claim in time

	// plain is the SASL PLAIN login while it holds (nil without one, or
	// once its rule is gone); plainRules the rule set it was last checked
	// against; recheck the timer that looks again.
	plain      *plainLogin
	plainRules *sas.Ruleset
	recheck    *time.Timer
}

func newAuthz(c *conn, timeout time.Duration) *authz {
	a := &authz{c: c, claims: map[string]sas.Claim{}, links: map[*amqp.Link]linkNeed{}}
	if pl, ok := c.amqp.Principal().(*plainLogin); ok {
		a.claims[claimKey(pl.claim)] = pl.claim
		a.everHeld = true
		a.plain, a.plainRules = pl, pl.rules
		a.recheck = time.AfterFunc(plainRecheckInterval, a.recheckPlain)
		return a
	}
	a.deadline = time.AfterFunc(timeout, a.presentationTimeout)
	return a
}

func claimKey(c sas.Claim) string { return c.Scope + "\x00" + strings.ToLower(c.Rule) }

func (a *authz) presentationTimeout() {
	a.mu.Lock()
	held := a.everHeld || a.closed
	a.mu.Unlock()
	if !held {
		a.c.log.Debug("no claim presented in time; closing the connection")
		a.c.amqp.Close(failUnauthorized.amqpError("no valid token was put on $cbs in time"))
	}
}

// close stops the timers once the connection is gone.
func (a *authz) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.deadline != nil {
		a.deadline.Stop()
	}
	if a.recheck != nil {
		a.recheck.Stop()
	}
	clear(a.links)
}

// refreshPlainLocked checks the SASL PLAIN login again when the rule set
// changed since the last check: its claim follows the rule's current
// rights and scope, or goes when the rule or the key is gone (for good:
// the client logs in again on a new connection).
func (a *authz) refreshPlainLocked() {
	if a.plain == nil {
		return
	}
	rs := a.c.srv.cfg.Rules.Ruleset()
	if rs == a.plainRules {
		return
	}
	a.plainRules = rs
	delete(a.claims, claimKey(a.plain.claim))
	cl, err := rs.AuthenticateDigest(a.plain.name, a.plain.key)
	if err != nil {
		a.c.log.Info("the SASL PLAIN login's rule changed; its rights are withdrawn", "rule", a.plain.claim.Rule, "err", err)
		a.plain = nil
		return
	}
	a.plain.claim = cl
	a.claims[claimKey(cl)] = cl
}

// recheckPlain runs every plainRecheckInterval while a SASL PLAIN login
// holds, and detaches the links it no longer covers.
func (a *authz) recheckPlain() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.refreshPlainLocked()
	lost, needs := a.uncoveredLocked(time.Now())
	if a.plain != nil {
		a.recheck.Reset(plainRecheckInterval)
	}
	a.mu.Unlock()
	a.detach(lost, needs, "the authorization rule of this connection's login was deleted or changed")
}

// grant adds a claim (replacing the one of the same scope and rule, which
// is how a renewal keeps links open).
func (a *authz) grant(cl sas.Claim) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := claimKey(cl)
	if _, ok := a.claims[k]; !ok && len(a.claims) >= maxClaimsPerConn {
		a.pruneLocked(time.Now())
		if len(a.claims) >= maxClaimsPerConn {
			return fmt.Errorf("a connection holds at most %d claims", maxClaimsPerConn)
		}
	}
	a.claims[k] = cl
	a.everHeld = true
	a.armLocked()
	return nil
}

// allows reports whether a claim meets need now.
func (a *authz) allows(need linkNeed) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshPlainLocked()
	return a.allowsLocked(need, time.Now())
}

func (a *authz) allowsLocked(need linkNeed, now time.Time) bool {
	for _, cl := range a.claims {
		if need.metBy(cl, now) {
			return true
		}
	}
	return false
}

// admit checks a link at attach and keeps watching it.
func (a *authz) admit(l *amqp.Link, need linkNeed) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshPlainLocked()
	if !a.allowsLocked(need, time.Now()) {
		return a.c.denied(need)
	}
	a.links[l] = need
	return nil
}

func (a *authz) watching(l *amqp.Link) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.links[l]
	return ok
}

func (a *authz) forget(l *amqp.Link) {
	a.mu.Lock()
	delete(a.links, l)
	a.mu.Unlock()
}

// pruneLocked drops expired claims.
func (a *authz) pruneLocked(now time.Time) {
	for k, cl := range a.claims {
		if cl.Expired(now) {
			delete(a.claims, k)
		}
	}
}

// armLocked sets the timer to the earliest expiry among the claims.
func (a *authz) armLocked() {
	var next time.Time
	for _, cl := range a.claims {
		if !cl.Expires.IsZero() && (next.IsZero() || cl.Expires.Before(next)) {
			next = cl.Expires
		}
	}
	if next.IsZero() || a.closed || (a.timer != nil && a.timerAt.Equal(next)) {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timerAt = next
	a.timer = time.AfterFunc(time.Until(next), a.expire)
}

// expire drops expired claims and detaches every link no claim covers
// any more.
func (a *authz) expire() {
	now := time.Now()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.pruneLocked(now)
	lost, needs := a.uncoveredLocked(now)
	a.timer, a.timerAt = nil, time.Time{}
	a.armLocked()
	a.mu.Unlock()
	a.detach(lost, needs, "the token authorizing this link expired and was not renewed")
}

// uncoveredLocked stops watching, and returns, the links no claim meets
// any more.
func (a *authz) uncoveredLocked(now time.Time) (lost []*amqp.Link, needs []linkNeed) {
	for l, need := range a.links {
		if !a.allowsLocked(need, now) {
			lost = append(lost, l)
			needs = append(needs, need)
			delete(a.links, l)
		}
	}
	return lost, needs
}

// detach ends links that lost their claim, with why; called without the
// lock, since a detach may call back into the link's handler.
func (a *authz) detach(lost []*amqp.Link, needs []linkNeed, why string) {
	for i, l := range lost {
		a.c.log.Debug("claim lost; detaching link", "link", l.Name(), "resource", needs[i].path, "why", why)
		l.Detach(a.c.deniedBecause(needs[i], why))
	}
}

// rightName is how Azure names the right a refused operation lacks.
func rightName(need linkNeed) string {
	if need.anyRight {
		return "Listen,Send"
	}
	return need.rights.String()
}

// denied is Azure's refusal: "Unauthorized access. 'Listen' claim(s) are
// required to perform this operation. Resource: 'sb://host/queue'.
// TrackingId:..., Timestamp:...".
func (c *conn) denied(need linkNeed) *amqp.Error {
	return c.deniedBecause(need, "")
}

func (c *conn) deniedBecause(need linkNeed, why string) *amqp.Error {
	detail := fmt.Sprintf("'%s' claim(s) are required to perform this operation. Resource: '%s'", rightName(need), c.resourceURI(need.path))
	if why != "" {
		detail = why + ". " + detail
	}
	return &amqp.Error{Condition: failUnauthorized.cond, Description: failUnauthorized.msg + ". " + failure{msg: detail}.describe("")}
}

// resourceURI names an entity path as Azure does in its refusals.
func (c *conn) resourceURI(path string) string {
	host := c.amqp.Open().Hostname
	if host == "" {
		host = "localhost"
	}
	return "sb://" + host + "/" + strings.TrimPrefix(path, "/")
}

// watched wraps a link's handler so that the link stops being watched
// for expiry when it ends.
func (a *authz) watched(l *amqp.Link, h amqp.LinkHandler) amqp.LinkHandler {
	switch h := h.(type) {
	case amqp.MessageHandler:
		return watchedReceiving{h, a}
	case amqp.SenderHandler:
		return watchedSending{h, a}
	}
	return h
}

type watchedReceiving struct {
	amqp.MessageHandler
	a *authz
}

func (w watchedReceiving) Detached(l *amqp.Link, err error) {
	w.a.forget(l)
	w.MessageHandler.Detached(l, err)
}

type watchedSending struct {
	amqp.SenderHandler
	a *authz
}

func (w watchedSending) Detached(l *amqp.Link, err error) {
	w.a.forget(l)
	w.SenderHandler.Detached(l, err)
}

// managementRight is the right each $management operation needs, as on
// Azure: Listen to receive, peek, renew, settle and work with sessions;
// Send to schedule and cancel; Manage for rules and anything unknown.
func managementRight(op string) sas.Rights {
	switch op {
	case "com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message":
		return sas.Send
	case "com.microsoft:renew-lock", "com.microsoft:update-disposition", "com.microsoft:peek-message",
		"com.microsoft:receive-by-sequence-number", "com.microsoft:renew-session-lock",
		"com.microsoft:get-session-state", "com.microsoft:set-session-state", "com.microsoft:get-message-sessions":
		return sas.Listen
	}
	return sas.Manage
}

// saslLogin is the SASL layer: ANONYMOUS (what the SDKs use, followed by
// tokens on $cbs) and PLAIN with a rule's name and one of its keys, which
// grants the rule's rights for the life of the connection.
type saslLogin struct {
	rules RuleSource
	log   func(msg string, args ...any)
}

func (s saslLogin) Mechanisms() []amqp.Symbol {
	// The SDKs pick the first mechanism they know (ANONYMOUS); MSSBCBS
	// tells them claims come through $cbs, as Service Bus says.
	return []amqp.Symbol{"PLAIN", "ANONYMOUS", "MSSBCBS"}
}

func (s saslLogin) Authenticate(mech amqp.Symbol, resp []byte, host string) (string, error) {
	id, _, err := s.AuthenticatePrincipal(mech, resp, host)
	return id, err
}

func (s saslLogin) AuthenticatePrincipal(mech amqp.Symbol, resp []byte, _ string) (string, any, error) {
	switch mech {
	case "ANONYMOUS":
		return "anonymous", nil, nil
	case "PLAIN":
		_, user, pass, ok := amqp.ParsePlain(resp)
		if !ok {
			return "", nil, amqp.ErrAuthFailed
		}
		digest, rs := sas.KeyDigest(pass), s.rules.Ruleset()
		claim, err := rs.AuthenticateDigest(user, digest)
		if err != nil {
			// The error names the rule at most, never the key.
			s.log("SASL PLAIN refused", "err", err)
			return "", nil, amqp.ErrAuthFailed
		}
		return claim.Rule, &plainLogin{claim: claim, name: user, key: digest, rules: rs}, nil
	}
	return "", nil, amqp.ErrAuthFailed
}
