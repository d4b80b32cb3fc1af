package frontend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Session receivers (Service Bus message sessions). A receiving link whose
// source filter holds com.microsoft:session-filter accepts a session: the
// one the filter names, or with a null value the next available one. The
// attach reply waits for the partition to lock it (amqp.Link.DeferAttach),
// then echoes the filter with the locked session's id and carries
// com.microsoft:locked-until-utc; a session that cannot be had is refused
// with an attach without source and a detach with the reason. The
// receiver then takes only that session's messages, and the session's
// $management operations (state, renew) of this connection find its lock
// here.

const (
	sessionFilterName amqp.Symbol = "com.microsoft:session-filter"
	propLockedUntil   amqp.Symbol = "com.microsoft:locked-until-utc"
	propTimeout       amqp.Symbol = "com.microsoft:timeout"
)

// maxSessionIDChars is Service Bus's limit on a session id, in
// characters. (The partition's own bound is the bytes that many
// characters may take in UTF-8.)
const maxSessionIDChars = 128

// checkSessionID refuses a session id longer than Service Bus allows.
func checkSessionID(sid string) error {
	if n := utf8.RuneCountInString(sid); n > maxSessionIDChars {
		return fmt.Errorf("the session id has %d characters, at most %d are allowed", n, maxSessionIDChars)
	}
	return nil
}

// maxSessionStateBytes is the largest session state e keeps: Service
// Bus's limit, the entity's maximum message size.
func maxSessionStateBytes(e *placementpb.Entity) int {
	if kb := e.GetProperties().GetMaxMessageSizeInKilobytes(); kb > 0 {
		return int(kb) << 10
	}
	return defaultMaxMessageBytes
}

// DefaultSessionAcceptWait is how long an accept-next waits for a session
// when the client names no com.microsoft:timeout: Service Bus's minute.
const DefaultSessionAcceptWait = time.Minute

// sessionLock is the lock a session receiver holds.
type sessionLock struct {
	id        string
	partition uint32
	token     []byte
	link      string // the receiver's link name
	// ending: the receiver's link ended and the lock is being given
	// back; released is closed once it was.
	ending   atomic.Bool
	released chan struct{}

	mu    sync.Mutex
	until time.Time
}

func (s *sessionLock) setUntil(t time.Time) {
	s.mu.Lock()
	s.until = t
	s.mu.Unlock()
}

// sessionKey names a session of an entity in a connection's registry.
type sessionKey struct {
	entity  uint64
	session string
}

// sessionRegistry holds the session locks of a connection's receivers.
// A request names its session by id, or (the Go SDK's peek and
// receive-deferred) by the receiver's link as associated-link-name.
type sessionRegistry struct {
	mu     sync.Mutex
	locks  map[sessionKey]*sessionLock
	byLink map[string]*sessionLock
}

func (r *sessionRegistry) add(e uint64, s *sessionLock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.locks == nil {
		r.locks = make(map[sessionKey]*sessionLock)
		r.byLink = make(map[string]*sessionLock)
	}
	r.locks[sessionKey{e, s.id}] = s
	r.byLink[s.link] = s
}

func (r *sessionRegistry) remove(e uint64, s *sessionLock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.locks[sessionKey{e, s.id}] == s {
		delete(r.locks, sessionKey{e, s.id})
	}
	if r.byLink[s.link] == s {
		delete(r.byLink, s.link)
	}
}

func (r *sessionRegistry) findLink(name string) *sessionLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byLink[name]
}

// requestSession returns the session a $management request of a session
// receiver names, by session-id or associated-link-name; nil for a
// request of no session. id is the session-id it named, if any. A
// session-id longer than Service Bus allows fails the request (ok false).
func (c *conn) requestSession(e *placementpb.Entity, body amqp.Map, req *rpcRequest) (lock *sessionLock, id string, ok bool) {
	if sid, _ := stringField(body, "session-id"); sid != "" {
		if err := checkSessionID(sid); err != nil {
			req.fail(failBadField, err.Error())
			return nil, "", false
		}
		return c.sessionLocks.find(e.Id, sid), sid, true
	}
	if v, ok := req.msg.ApplicationProperties.Get("associated-link-name"); ok {
		if name, ok := v.(string); ok {
			return c.sessionLocks.findLink(name), "", true
		}
	}
	return nil, "", true
}

func (r *sessionRegistry) find(e uint64, sid string) *sessionLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.locks[sessionKey{e, sid}]
}

// sessionRequest is what a session receiver's attach asks for.
type sessionRequest struct {
	key        any // the filter's key and descriptor, echoed in the reply
	descriptor any
	id         string // "": the next available session
	// deadline: when an accept-next with none available answers, fixed
	// when the attach arrived (not when the goroutine that accepts got to
	// run: under load that came tens of milliseconds later).
	deadline time.Time
}

// sessionFilter reads the session filter of a receiving link's source;
// ok is false when it has none. now is when the attach arrived.
func sessionFilter(a *amqp.Attach, defaultWait time.Duration, now time.Time) (req sessionRequest, ok bool, err error) {
	if a.Source == nil {
		return req, false, nil
	}
	for _, p := range a.Source.Filter {
		if k, isSym := p.Key.(amqp.Symbol); !isSym || k != sessionFilterName {
			continue
		}
		req.key = p.Key
		v := p.Value
		if d, isDesc := v.(amqp.Described); isDesc {
			req.descriptor, v = d.Descriptor, d.Value
		} else if d, isDesc := v.(*amqp.Described); isDesc && d != nil {
			req.descriptor, v = d.Descriptor, d.Value
		}
		switch id := v.(type) {
		case nil:
		case string:
			if id == "" {
				return req, true, amqp.Errorf(amqp.ErrCondInvalidField, "the session filter names an empty session id")
			}
			if err := checkSessionID(id); err != nil {
				return req, true, amqp.Errorf(amqp.ErrCondInvalidField, "the session filter: %v", err)
			}
			req.id = id
		default:
			return req, true, amqp.Errorf(amqp.ErrCondInvalidField, "the session filter must be a string or null, got %T", v)
		}
		ok = true
		break
	}
	if !ok {
		return req, false, nil
	}
	wait := defaultWait
	if v, present := a.Properties.Get(propTimeout); present {
		var ms int64
		switch t := v.(type) {
		case uint32:
			ms = int64(t)
		case uint64:
			ms = int64(min(t, uint64(24*time.Hour/time.Millisecond)))
		case int64:
			ms = max(t, 0)
		case int32:
			ms = int64(max(t, 0))
		}
		wait = acceptWait(time.Duration(ms) * time.Millisecond)
	}
	req.deadline = now.Add(wait)
	return req, true, nil
}

// acceptWaitOf is how long an accept-next of e without a client timeout
// waits: the entity's own wait (QueueProperties.session_accept_wait_ms)
// where it is shorter than the front-end's.
func acceptWaitOf(e *placementpb.Entity, frontend time.Duration) time.Duration {
	if ms := e.GetProperties().SessionAcceptWaitMs; ms != nil {
		return min(frontend, time.Duration(*ms)*time.Millisecond)
	}
	return frontend
}

// acceptWait is how long an accept-next whose client gives up after t
// (com.microsoft:timeout) waits before it answers that none is there: a
// second less, or half of t when t is shorter than two seconds.
//
// The Go SDK sends what remains of its context's deadline, less a few
// milliseconds. Unless the refusal reached it and its detach went out
// before that deadline, its call fails with the context's error, not the
// timeout the application looks for; and it returns only once its end of
// the AMQP session was answered. So the wait leaves room for what happens
// around it, which takes time whatever t is: the attach's way here after
// the SDK read its clock, our answer (its timer and goroutines), the way
// back, the client's detach and end. On an idle machine that is a few
// milliseconds; under load every step waits for a CPU, and together they
// took most of a second on the loaded two-core machine, where a margin of
// a tenth failed (the commit that set it has the runs). Half of a short t
// keeps a short wait a wait.
func acceptWait(t time.Duration) time.Duration {
	return t - min(time.Second, t/2)
}

// dotnetTicks is t in .NET ticks: 100 ns since 0001-01-01 UTC.
func dotnetTicks(t time.Time) int64 {
	return t.UnixMilli()*10_000 + 621_355_968_000_000_000
}

// sessions returns the Backend's session operations, or nil.
func (c *conn) sessions() SessionBackend {
	sb, _ := c.srv.cfg.Backend.(SessionBackend)
	return sb
}

// acceptSession locks the session r's attach asked for and answers the
// attach: with the session, or refused. It runs on its own goroutine,
// which newReceiver starts before the engine holds the reply (the engine
// keeps an answer given that early, amqp.Link.CompleteAttach); every way
// out answers, and an answer to a link that ended does nothing.
func (r *receiver) acceptSession(sr sessionRequest) {
	sb := r.c.sessions()
	e := r.entity
	partitions := uint32(max(len(e.PartitionGroups), 1))
	refuse := func(f failure, detail string) { r.link.RefuseAttach(f.amqpError(detail)) }
	// The calls do not end with the link: a call given up half way may
	// still lock a session, which nobody would then release. One that
	// locks a session after the peer detached releases it below.

	var res *partitionpb.Result
	var token []byte
	var part uint32
	var err error
	if sr.id != "" {
		// The SDKs accept a session again after its link failed: wait
		// for the release of that link's lock on this connection first.
		if old := r.c.sessionLocks.find(e.Id, sr.id); old != nil && old.ending.Load() {
			select {
			case <-old.released:
			case <-time.After(sendTimeout):
			case <-r.ctx.Done():
			}
		}
		part = partitionpb.PartitionForKey(sr.id, partitions)
		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		res, err = served(r.c.srv, ctx, e, part, 0, func(ctx context.Context) (*partitionpb.Result, error) {
			res, t, err := sb.AcceptSession(ctx, e, &partitionpb.AcceptSessionRequest{Partition: part, SessionId: sr.id})
			token = t
			return res, err
		})
		cancel()
	} else {
		res, token, part, err = r.acceptNext(sb, partitions, sr.deadline)
	}
	if err != nil {
		refuse(errFailure(err), "")
		return
	}
	if f, failed := resultFailure(res.GetCode()); failed {
		refuse(f, res.GetDescription())
		return
	}
	if res.GetSessionId() == "" || len(token) == 0 {
		// None in time, or the link ended (then the engine has answered
		// the attach, and this does nothing).
		refuse(failNoSession, "")
		return
	}
	lock := &sessionLock{id: res.SessionId, partition: part, token: token, link: r.link.Name(), released: make(chan struct{})}
	until := time.Now()
	if len(res.LockedUntilMs) > 0 {
		until = time.UnixMilli(res.LockedUntilMs[0]).UTC()
	}
	lock.setUntil(until)
	src := *r.link.Attach().Source
	src.Filter = append(amqp.Map(nil), src.Filter...)
	for i, p := range src.Filter {
		if p.Key != sr.key {
			continue
		}
		// In the form the client sent: described (Go, .NET) or plain
		// (JavaScript).
		src.Filter[i].Value = lock.id
		if sr.descriptor != nil {
			src.Filter[i].Value = amqp.Described{Descriptor: sr.descriptor, Value: lock.id}
		}
	}
	r.mu.Lock()
	r.session = lock
	r.mu.Unlock()
	r.c.sessionLocks.add(e.Id, lock)
	if r.ctx.Err() != nil {
		// The link ended meanwhile (the engine answered the attach) or
		// the receiver was stopped: refused, whichever it was.
		refuse(failNoSession, "the link ended while the session was accepted")
		r.releaseSession()
		return
	}
	if !r.link.CompleteAttach(&src, amqp.Map{{Key: propLockedUntil, Value: dotnetTicks(until)}}) {
		r.releaseSession()
		return
	}
	go r.pump()
	go r.settleLoop()
}

// acceptNext locks the next available session of r's entity, waiting
// until deadline for one. An entity of one partition is asked once, and
// its leader waits (acceptWaiting). A partitioned entity's partitions are
// asked in turn without waiting, from a random one (so that concurrent
// accept-nexts spread); then every partition is probed at once
// (SessionReady, which locks nothing) and the first that has a session is
// asked again without waiting. So a waiting accept-next gets the first
// session that becomes available on any partition, and only calls that
// lock at once are made: the probes given up when one partition answered
// hold nothing.
func (r *receiver) acceptNext(sb SessionBackend, partitions uint32, deadline time.Time) (res *partitionpb.Result, token []byte, part uint32, err error) {
	e := r.entity
	accept := func(p uint32, wait time.Duration) (*partitionpb.Result, []byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait+sendTimeout)
		defer cancel()
		return sb.AcceptSession(ctx, e, &partitionpb.AcceptSessionRequest{Partition: p, Next: true, WaitMs: max(wait.Milliseconds(), 0)})
	}
	// got reports whether an answer ends the accept: a session, or a
	// failure.
	got := func(res *partitionpb.Result, err error) bool {
		return err != nil || res.GetSessionId() != "" || res.GetCode() != partitionpb.ResultCode_RESULT_OK
	}
	if partitions == 1 {
		res, token, err = r.acceptWaiting(0, deadline, func() (*partitionpb.Result, []byte, error) {
			return accept(0, time.Until(deadline))
		})
		return res, token, 0, err
	}
	first := rand.Uint32N(partitions)
	for i := range partitions {
		part = (first + i) % partitions
		if res, token, err = accept(part, 0); got(res, err) {
			return res, token, part, err
		}
	}

	ctx, cancel := context.WithDeadline(r.ctx, deadline)
	defer cancel()
	ready := make(chan uint32, partitions)
	probe := func(p uint32) {
		for ctx.Err() == nil {
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			ok, err := sb.SessionReady(ctx, e, p, left)
			if err == nil && ok {
				ready <- p
				return
			}
			if err != nil && ctx.Err() == nil {
				// A partition without a leader for now: ask again soon,
				// as a long-poll receive does.
				r.c.log.Debug("session probe failed", "entity", e.Name, "partition", p, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
	for p := range partitions {
		go probe(p)
	}
	for {
		select {
		case <-ctx.Done():
			return &partitionpb.Result{}, nil, 0, nil // none in time, or the link ended
		case part = <-ready:
		}
		if res, token, err = accept(part, 0); got(res, err) {
			return res, token, part, err
		}
		go probe(part) // another receiver was first: wait for the next
	}
}

// acceptWaiting runs call, an accept-next on partition part whose leader
// waits for a session until about deadline, and answers by deadline
// whatever the call does: an empty result (none in time) when its answer
// is not there yet, or when r's link ended. The leader's own answer at
// the end of its wait comes later than deadline (its timer, the way back
// over gRPC and through the router), by more under load, and the client's
// budget has no room for it. The call is not cancelled,
// since a cancelled accept may still have locked a session: one that its
// late answer brings is given back.
func (r *receiver) acceptWaiting(part uint32, deadline time.Time, call func() (*partitionpb.Result, []byte, error)) (*partitionpb.Result, []byte, error) {
	type answer struct {
		res   *partitionpb.Result
		token []byte
		err   error
	}
	if !time.Now().Before(deadline) {
		// No time to wait (a client timeout of 0): a session that is
		// there now is still had.
		return call()
	}
	done := make(chan answer, 1)
	go func() {
		res, token, err := call()
		done <- answer{res, token, err}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case a := <-done:
		return a.res, a.token, a.err
	case <-timer.C:
	case <-r.ctx.Done():
	}
	go func() {
		a := <-done
		if sid := a.res.GetSessionId(); a.err == nil && sid != "" && len(a.token) > 0 {
			r.giveBack(&sessionLock{id: sid, partition: part, token: a.token})
		}
	}()
	return &partitionpb.Result{}, nil, nil
}

// giveBack releases a session lock that r took but does not keep. A lock
// that could not be given back ends by expiry, after the entity's lock
// duration: that is worth a warning.
func (r *receiver) giveBack(lock *sessionLock) {
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	res, err := r.c.sessions().ReleaseSession(ctx, r.entity, &partitionpb.ReleaseSession{
		Partition: lock.partition, SessionId: lock.id, Token: lock.token,
	})
	switch {
	case err == nil && res.GetCode() == partitionpb.ResultCode_RESULT_OK:
	case err == nil && res.GetCode() == partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST:
		// Gone already (it ran out, or the receiver saw it lost).
		r.c.log.Debug("session release: the lock was gone", "entity", r.entity.Name, "session", lock.id)
	default:
		r.c.log.Warn("session release failed: the session stays locked until its lock expires",
			"entity", r.entity.Name, "session", lock.id, "err", err, "code", res.GetCode(), "detail", res.GetDescription())
	}
}

// releaseSession gives the session lock back (the receiver closed): the
// messages it holds and did not settle return to the session without
// counting a delivery. Once only.
func (r *receiver) releaseSession() {
	r.mu.Lock()
	lock := r.session
	r.mu.Unlock()
	if lock == nil {
		return // none yet: acceptSession releases what it takes after the detach
	}
	lock.ending.Store(true)
	r.releaseOnce.Do(func() {
		// Out of the registry only once released: an accept of the same
		// session on this connection waits for that.
		defer close(lock.released)
		defer r.c.sessionLocks.remove(r.entity.Id, lock)
		r.giveBack(lock)
	})
}

// sessionLost ends a session receiver whose lock is gone: its link is
// detached with session-lock-lost, which the SDKs answer by accepting the
// session again.
//
// The dispositions the client sent before are answered first, with what
// the partition made of them. A complete may have been applied while the
// lock held and be answered only after a later receive found the lock
// gone: its partition's leader died after committing it, and the retry
// under the same request id reaches the next leader after the pump's
// receive did. A detach would fail that complete at the client
// (session-lock-lost), which then takes the message for not completed
// although it is gone: the chaos suite saw exactly that as a message
// "stranded" after two machine crashes (docs/reliability.md).
func (r *receiver) sessionLost(detail string) {
	r.unsettled.wait(sendTimeout)
	r.c.sessionLocks.remove(r.entity.Id, r.session)
	r.link.Detach(failSessionLockLost.amqpError(detail))
	r.cancel()
}

// heldSession returns the lock of a session one of the connection's
// receivers holds, answering the request 410 when there is none.
func (c *conn) heldSession(e *placementpb.Entity, body amqp.Map, req *rpcRequest) (*sessionLock, bool) {
	if c.sessions() == nil {
		req.fail(failNotImpl, "sessions")
		return nil, false
	}
	sid, err := stringField(body, "session-id")
	if err != nil || sid == "" {
		req.fail(failBadField, "the request needs a session-id")
		return nil, false
	}
	if err := checkSessionID(sid); err != nil {
		req.fail(failBadField, err.Error())
		return nil, false
	}
	lock := c.sessionLocks.find(e.Id, sid)
	if lock == nil {
		req.fail(failSessionLockLost, "no receiver of this connection holds session "+sid)
		return nil, false
	}
	return lock, true
}

// renewSessionLock: session-id → 200 {expiration: timestamp}.
func (c *conn) renewSessionLock(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	lock, ok := c.heldSession(e, body, req)
	if !ok {
		return
	}
	res, err := served(c.srv, ctx, e, lock.partition, 0, func(ctx context.Context) (*partitionpb.Result, error) {
		return c.sessions().RenewSessionLock(ctx, e, &partitionpb.RenewSessionLock{
			Partition: lock.partition, SessionId: lock.id, Token: lock.token,
		})
	})
	if answered(req, res, err) {
		return
	}
	until := time.Now().UTC()
	if len(res.LockedUntilMs) > 0 {
		until = time.UnixMilli(res.LockedUntilMs[0]).UTC()
	}
	lock.setUntil(until)
	req.respond(200, "OK", amqp.Map{{Key: "expiration", Value: until}})
}

// getSessionState: session-id → 200 {session-state: binary, or null for
// none}.
func (c *conn) getSessionState(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	lock, ok := c.heldSession(e, body, req)
	if !ok {
		return
	}
	var state []byte
	res, err := served(c.srv, ctx, e, lock.partition, 0, func(ctx context.Context) (*partitionpb.Result, error) {
		res, s, err := c.sessions().GetSessionState(ctx, e, &partitionpb.GetSessionStateRequest{
			Partition: lock.partition, SessionId: lock.id, Token: lock.token,
		})
		state = s
		return res, err
	})
	if answered(req, res, err) {
		return
	}
	var v any // null: no state
	if len(state) > 0 {
		v = state
	}
	req.respond(200, "OK", amqp.Map{{Key: "session-state", Value: v}})
}

// setSessionState: session-id, session-state (binary; empty or null
// clears it) → 200.
func (c *conn) setSessionState(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	lock, ok := c.heldSession(e, body, req)
	if !ok {
		return
	}
	var state []byte
	switch v, _ := body.Get("session-state"); s := v.(type) {
	case nil:
	case []byte:
		state = s
	default:
		req.fail(failBadField, "session-state must be binary or null")
		return
	}
	if max := maxSessionStateBytes(e); len(state) > max {
		req.fail(failBadField, fmt.Sprintf("a session state of %d bytes exceeds the entity's maximum message size of %d bytes", len(state), max))
		return
	}
	res, err := served(c.srv, ctx, e, lock.partition, len(state), func(ctx context.Context) (*partitionpb.Result, error) {
		return c.sessions().SetSessionState(ctx, e, &partitionpb.SetSessionState{
			Partition: lock.partition, SessionId: lock.id, Token: lock.token, State: state,
		})
	})
	if answered(req, res, err) {
		return
	}
	req.respond(200, "OK", amqp.Map{})
}

// maxListSessions caps the sessions one get-message-sessions returns.
const maxListSessions = 1000

// listAllSessions: a last-updated-time at or past it asks for the default
// listing (the Go SDK sends year 10000, .NET DateTime.MaxValue).
var listAllSessions = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// getMessageSessions: skip, top, last-updated-time → 200 {sessions-ids:
// array of strings}, 204 when there are none. The default listing has
// every session with messages (deferred and scheduled ones too), a state
// or a lock; an earlier last-updated-time lists the sessions whose state
// was set or cleared since, as Service Bus's GetMessageSessions(DateTime).
func (c *conn) getMessageSessions(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	sb := c.sessions()
	if sb == nil {
		req.fail(failNotImpl, "sessions")
		return
	}
	skip, top := int64(0), int64(100)
	var err error
	if _, ok := body.Get("skip"); ok {
		if skip, err = intField(body, "skip", 0, 1<<31-1); err != nil {
			req.fail(failBadField, err.Error())
			return
		}
	}
	if _, ok := body.Get("top"); ok {
		if top, err = intField(body, "top", 0, 1<<31-1); err != nil {
			req.fail(failBadField, err.Error())
			return
		}
	}
	top = min(top, maxListSessions)
	var since int64
	switch v, _ := body.Get("last-updated-time"); t := v.(type) {
	case nil:
	case time.Time:
		if t.Before(listAllSessions) {
			since = max(t.UnixMilli(), 1)
		}
	default:
		req.fail(failBadField, fmt.Sprintf("last-updated-time must be a timestamp, got %T", v))
		return
	}
	// A partitioned entity's sessions are listed partition after
	// partition, skip counting over all of them.
	var ids []string
	partitions := uint32(max(len(e.PartitionGroups), 1))
	for p := uint32(0); p < partitions && int64(len(ids)) < top; p++ {
		got, err := sb.ListSessions(ctx, e, &partitionpb.ListSessionsRequest{Partition: p, Skip: 0, Top: uint32(skip + top), UpdatedSinceMs: since})
		if err != nil {
			req.fail(errFailure(err), "")
			return
		}
		n := int64(len(got))
		if skip >= n {
			skip -= n
			continue
		}
		got = got[skip:]
		skip = 0
		ids = append(ids, got[:min(int64(len(got)), top-int64(len(ids)))]...)
	}
	if len(ids) == 0 {
		req.respond(204, "No Content", amqp.Map{{Key: "sessions-ids", Value: []string{}}})
		return
	}
	req.respond(200, "OK", amqp.Map{{Key: "sessions-ids", Value: ids}})
}
