package amqp

import (
	"fmt"
	"math"
)

// Session is one AMQP session (spec 2.5.5). We never begin sessions
// ourselves, so our channel number mirrors the peer's.
type Session struct {
	conn    *Conn
	channel uint16
	window  uint32 // our configured incoming window

	// Guarded by conn.mu.
	links map[uint32]*Link // by handle; ours mirror the peer's
	ended bool             // our end frame went out; ignore all but end

	// Incoming transfers (spec 2.5.6).
	nextIncomingID uint32
	incomingWindow uint32 // transfers the peer may still send

	// Outgoing transfers.
	nextOutgoingID       uint32 // transfer-id of our next transfer frame
	remoteIncomingWindow uint32 // transfers we may still send
	nextDeliveryID       uint32
	unsettled            map[uint32]*Link // our unsettled deliveries
	blocked              []*outgoing      // deliveries waiting for the peer's window

	run dispositionRun // settlements waiting to go out as one frame
}

// dispositionRun coalesces consecutive settlements with the same outcome
// into a single disposition frame covering first..last.
type dispositionRun struct {
	active  bool
	role    Role
	first   uint32
	last    uint32
	settled bool
	state   DeliveryState
}

// Conn returns the session's connection.
func (s *Session) Conn() *Conn { return s.conn }

// Channel returns the session's channel number.
func (s *Session) Channel() uint16 { return s.channel }

func (c *Conn) onBegin(channel uint16, d *decoder) error {
	var p Begin
	if err := p.decode(d); err != nil {
		return err
	}
	if p.HasRemoteChannel {
		return Errorf(ErrCondNotAllowed, "begin with remote-channel: this endpoint does not begin sessions")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, busy := c.sessions[channel]; busy {
		return Errorf(ErrCondIllegalState, "begin on channel %d, which has a session", channel)
	}
	s := &Session{
		conn:                 c,
		channel:              channel,
		window:               c.srv.sessionWindow(),
		links:                make(map[uint32]*Link),
		nextIncomingID:       p.NextOutgoingID,
		remoteIncomingWindow: p.IncomingWindow,
		unsettled:            make(map[uint32]*Link),
	}
	s.incomingWindow = s.window
	c.sessions[channel] = s
	reply := Begin{
		RemoteChannel:    channel,
		HasRemoteChannel: true,
		NextOutgoingID:   s.nextOutgoingID,
		IncomingWindow:   s.incomingWindow,
		OutgoingWindow:   math.MaxUint32,
		HandleMax:        handleMax,
	}
	c.writeFrameLocked(channel, reply.append)
	return nil
}

// dispatch handles a session-level frame. Session errors end the session;
// a returned error closes the whole connection.
func (s *Session) dispatch(code uint64, d *decoder, body []byte) error {
	c := s.conn
	if code == descEnd {
		return s.onEnd(d)
	}
	c.mu.Lock()
	ended := s.ended
	c.mu.Unlock()
	if ended {
		return nil // frames in flight before the peer saw our end
	}
	var err error
	switch code {
	case descAttach:
		err = s.onAttach(d)
	case descFlow:
		err = s.onFlow(d)
	case descTransfer:
		err = s.onTransfer(d, body)
	case descDisposition:
		err = s.onDisposition(d)
	case descDetach:
		err = s.onDetach(d)
	}
	if err != nil {
		e := asError(err)
		if e.Condition == ErrCondDecodeError || e.Condition == ErrCondFramingError {
			return e // the stream itself is suspect: close the connection
		}
		s.end(e)
	}
	return nil
}

// end ends the session from our side with an error.
func (s *Session) end(e *Error) {
	c := s.conn
	c.mu.Lock()
	if s.ended {
		c.mu.Unlock()
		return
	}
	s.ended = true
	c.writeFrameLocked(s.channel, func(b []byte) []byte { return appendErrorOnly(b, descEnd, e) })
	links := s.detachAllLocked(nil)
	c.mu.Unlock()
	for _, l := range links {
		l.handler.Detached(l, fmt.Errorf("%w: session ended: %v", ErrLinkClosed, e))
	}
}

func (s *Session) onEnd(d *decoder) error {
	peerErr, err := decodeErrorOnly(d)
	if err != nil {
		return err
	}
	c := s.conn
	c.mu.Lock()
	if !s.ended {
		s.ended = true
		c.writeFrameLocked(s.channel, func(b []byte) []byte { return appendErrorOnly(b, descEnd, nil) })
	}
	links := s.detachAllLocked(nil)
	delete(c.sessions, s.channel)
	c.mu.Unlock()
	cause := fmt.Errorf("%w: session ended", ErrLinkClosed)
	if peerErr != nil {
		cause = fmt.Errorf("%w: session ended by the peer: %v", ErrLinkClosed, peerErr)
	}
	for _, l := range links {
		l.handler.Detached(l, cause)
	}
	return nil
}

// detachAllLocked marks every link of the session detached and returns
// those whose handlers still need telling, appended to out.
func (s *Session) detachAllLocked(out []*Link) []*Link {
	for h, l := range s.links {
		if l.markDetachedLocked() {
			out = append(out, l)
		}
		delete(s.links, h)
		s.conn.linkCount--
	}
	clear(s.unsettled)
	s.blocked = nil
	s.run.active = false
	return out
}

// sessionFlowLocked appends the session part of a flow frame: the state
// the peer uses to compute our windows.
func (s *Session) flowLocked() Flow {
	return Flow{
		NextIncomingID:    s.nextIncomingID,
		HasNextIncomingID: true,
		IncomingWindow:    s.incomingWindow,
		NextOutgoingID:    s.nextOutgoingID,
		OutgoingWindow:    math.MaxUint32,
	}
}

func (s *Session) writeFlowLocked(f *Flow) {
	s.conn.writeFrameLocked(s.channel, f.append)
}

func (s *Session) onFlow(d *decoder) error {
	var p Flow
	if err := p.decode(d); err != nil {
		return err
	}
	c := s.conn
	c.mu.Lock()
	// Our window into the peer (spec 2.5.6): next-incoming-id absent means
	// the peer has not seen our begin yet; our initial id is 0.
	var next uint32
	if p.HasNextIncomingID {
		next = p.NextIncomingID
	}
	s.remoteIncomingWindow = next + p.IncomingWindow - s.nextOutgoingID
	s.sendBlockedLocked()
	if !p.HasHandle {
		if p.Echo {
			f := s.flowLocked()
			s.writeFlowLocked(&f)
		}
		c.mu.Unlock()
		return nil
	}
	l := s.links[p.Handle]
	if l == nil {
		c.mu.Unlock()
		return Errorf(ErrCondUnattachedHandle, "flow for handle %d, which is not attached", p.Handle)
	}
	credit, drain, notify := l.onFlowLocked(&p)
	c.mu.Unlock()
	if notify {
		l.sender.Flow(l, credit, drain)
	}
	return nil
}

func (s *Session) onTransfer(d *decoder, body []byte) error {
	var p Transfer
	if err := p.decode(d); err != nil {
		return err
	}
	payload := body[d.off:]
	c := s.conn
	c.mu.Lock()
	if s.incomingWindow == 0 {
		c.mu.Unlock()
		return Errorf(ErrCondWindowViolation, "transfer beyond the incoming window")
	}
	s.incomingWindow--
	s.nextIncomingID++
	if s.incomingWindow <= s.window/2 {
		s.incomingWindow = s.window
		f := s.flowLocked()
		s.writeFlowLocked(&f)
	}
	l := s.links[p.Handle]
	if l == nil {
		c.mu.Unlock()
		return Errorf(ErrCondUnattachedHandle, "transfer on handle %d, which is not attached", p.Handle)
	}
	dl, err := l.onTransferLocked(&p, payload)
	c.mu.Unlock()
	if err != nil {
		l.Detach(err)
		return nil
	}
	if dl != nil {
		l.receiver.Message(l, dl)
		c.mu.Lock()
		l.finishMessageLocked()
		c.mu.Unlock()
	}
	return nil
}

func (s *Session) onDisposition(d *decoder) error {
	var p Disposition
	if err := p.decode(d); err != nil {
		return err
	}
	if p.Role == RoleSender {
		// The peer settles deliveries it sent us; in receiver settle mode
		// second that is the end of them, and we track nothing for it.
		return nil
	}
	last := p.First
	if p.HasLast {
		last = p.Last
	}
	if last-p.First > 1<<20 {
		return Errorf(ErrCondInvalidField, "disposition range %d..%d too large", p.First, last)
	}
	type settled struct {
		l  *Link
		id uint32
	}
	var one [1]settled
	hits := one[:0]
	c := s.conn
	c.mu.Lock()
	for id := p.First; ; id++ {
		if l := s.unsettled[id]; l != nil {
			if p.Settled {
				delete(s.unsettled, id)
			}
			hits = append(hits, settled{l, id})
		}
		if id == last {
			break
		}
	}
	c.mu.Unlock()
	for _, h := range hits {
		h.l.sender.Disposition(h.l, h.id, p.State, p.Settled)
	}
	return nil
}

func (s *Session) onDetach(d *decoder) error {
	var p Detach
	if err := p.decode(d); err != nil {
		return err
	}
	c := s.conn
	c.mu.Lock()
	l := s.links[p.Handle]
	if l == nil {
		c.mu.Unlock()
		return Errorf(ErrCondUnattachedHandle, "detach of handle %d, which is not attached", p.Handle)
	}
	delete(s.links, p.Handle)
	c.linkCount--
	for id, ul := range s.unsettled {
		if ul == l {
			delete(s.unsettled, id)
		}
	}
	if l.attachPending {
		// Our attach reply is still held back (DeferAttach): it goes
		// first, as a refusal, and its detach answers the peer's.
		l.attachPending = false
		l.refuseLocked(l.pendingReply, Errorf(ErrCondDetachForced, "detached before the attach was answered"))
		l.detached = false // the handler has yet to hear of it
	}
	if !l.detachSent {
		reply := Detach{Handle: p.Handle, Closed: p.Closed}
		if l.holdDetach {
			l.heldDetach = &reply // SendDetachReply sends it
		} else {
			c.writeFrameLocked(s.channel, reply.append)
		}
	}
	notify := l.markDetachedLocked()
	c.mu.Unlock()
	if notify {
		// The handler hears why the link ended: the peer's error, or ours
		// when we detached it.
		err := l.detachErr
		if p.Error != nil {
			err = p.Error
		}
		l.handler.Detached(l, err)
	}
	return nil
}

// maxSenderRun caps the ids one disposition frame settles for deliveries
// we sent. go-amqp (v1.7, and so the Go SDK) hands such a frame to the
// receiving link once for every id it covers, and the link walks the whole
// range each time: a run of n costs it n*n map lookups, so a run as long
// as a fetch (hundreds) costs a receiving client far more than the frames
// it saves. Around 16 the lookups cost about what one more frame does.
// Settlements of the peer's transfers (role receiver) go on uncapped: the
// SDK handles those once per frame.
const maxSenderRun = 16

// addRunLocked adds one settlement to the session's disposition run,
// writing the previous run first when the new one cannot extend it.
func (s *Session) addRunLocked(role Role, id uint32, settled bool, state DeliveryState) {
	r := &s.run
	if r.active && r.role == role && r.settled == settled && id == r.last+1 && sameOutcome(r.state, state) &&
		(role != RoleSender || r.last-r.first+1 < maxSenderRun) {
		r.last = id
		return
	}
	c := s.conn
	if r.active {
		c.flushRunsLocked()
	}
	*r = dispositionRun{active: true, role: role, first: id, last: id, settled: settled, state: state}
	c.dispRuns = append(c.dispRuns, s)
	c.signal()
}

// sameOutcome reports whether two states can share a disposition frame:
// only the outcomes without fields can.
func sameOutcome(a, b DeliveryState) bool {
	switch a.(type) {
	case Accepted:
		_, ok := b.(Accepted)
		return ok
	case Released:
		_, ok := b.(Released)
		return ok
	}
	return false
}
