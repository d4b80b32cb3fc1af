package amqp

import "fmt"

// Link is one attached link. Which half of its methods apply depends on
// the direction: on a link where the peer sends (PeerRole is RoleSender)
// the handler receives messages and settles them; on a link where the peer
// receives it sends with Send and reacts to credit. Methods may be called
// from any goroutine.
type Link struct {
	session *Session
	attach  Attach // the peer's attach frame
	handle  uint32

	handler  LinkHandler
	receiver MessageHandler // set when the peer sends
	sender   SenderHandler  // set when the peer receives

	// Guarded by conn.mu.
	maxMessageSize uint64 // the largest message we accept
	detachSent     bool   // we sent detach; waiting for the peer's
	detachErr      error  // why we detached, for the handler
	detached       bool   // Detached has been (or is being) called
	// attachPending: the handler deferred the attach reply (DeferAttach)
	// and pendingReply waits for CompleteAttach or RefuseAttach.
	attachPending bool
	deferAttach   bool // set by DeferAttach during ConnHandler.Attach
	pendingReply  Attach
	// early is a reply the handler gave (CompleteAttach, RefuseAttach)
	// on another goroutine before ConnHandler.Attach returned, so before
	// the reply was pending: onAttach sends it. attachAnswered: the
	// deferred reply was given, early or not; later calls do nothing.
	early          *earlyReply
	attachAnswered bool
	// holdDetach (HoldDetachReply): our answer to the peer's detach waits
	// for SendDetachReply, held in heldDetach meanwhile.
	holdDetach bool
	heldDetach *Detach
	sndSettle  uint8 // effective settle modes
	rcvSettle  uint8

	// Peer sends: credit we granted and deliveries handed to the handler.
	creditWindow  uint32
	credit        uint32
	deliveryCount uint32
	outstanding   uint32
	asm           []byte // a multi-frame message being assembled; its cap is charged to the budgets
	asmActive     bool
	asmID         uint32
	asmTag        []byte
	asmFormat     uint32
	asmSettled    bool

	// Peer receives: credit the peer granted us.
	sendCredit        uint32
	sendDeliveryCount uint32
	drainRequested    bool
}

// Attach returns the peer's attach frame: name, role, settle modes,
// source, target, properties. It must not be modified.
func (l *Link) Attach() *Attach { return &l.attach }

// Name returns the link name.
func (l *Link) Name() string { return l.attach.Name }

// PeerRole is the peer's role: RoleSender when it sends messages to us.
func (l *Link) PeerRole() Role { return l.attach.Role }

// Session returns the link's session.
func (l *Link) Session() *Session { return l.session }

// Conn returns the link's connection.
func (l *Link) Conn() *Conn { return l.session.conn }

// SetMaxMessageSize sets the largest message the link accepts. Call it from
// ConnHandler.Attach, before the attach reply announces it.
func (l *Link) SetMaxMessageSize(n uint64) {
	c := l.session.conn
	c.mu.Lock()
	l.maxMessageSize = n
	c.mu.Unlock()
}

// SetCreditWindow sets how many unsettled messages the peer may have in
// flight on a link where it sends. The engine tops credit up as the handler
// settles; a window of 0 stops the peer once its current credit is spent.
func (l *Link) SetCreditWindow(n uint32) {
	c := l.session.conn
	c.mu.Lock()
	l.creditWindow = n
	l.topUpLocked()
	c.mu.Unlock()
}

// DeferAttach, called from ConnHandler.Attach, holds the attach reply
// back until the handler calls CompleteAttach or RefuseAttach, from any
// goroutine: for a link whose terms depend on work that takes a while
// (a Service Bus session receiver waits for a session to lock). The
// reading goroutine goes on meanwhile. A peer that detaches first gets a
// refusal, and the handler hears Detached.
func (l *Link) DeferAttach() {
	c := l.session.conn
	c.mu.Lock()
	l.deferAttach = true
	c.mu.Unlock()
}

// earlyReply is a deferred attach reply given before it was pending.
type earlyReply struct {
	refuse     error // non-nil: RefuseAttach's
	source     *Source
	properties Map
}

// CompleteAttach sends a deferred attach reply. source, when not nil,
// replaces the source the reply echoes (a receiving peer's), and
// properties are the reply's link properties. It reports false when the
// link ended before.
func (l *Link) CompleteAttach(source *Source, properties Map) bool {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.answerEarlyLocked(&earlyReply{source: source, properties: properties}) {
		return true
	}
	if !l.attachPending || l.detachSent || l.detached || l.session.ended {
		return false
	}
	l.attachPending = false
	l.completeLocked(l.pendingReply, source, properties)
	return true
}

func (l *Link) completeLocked(reply Attach, source *Source, properties Map) {
	if source != nil {
		reply.Source = source
	}
	reply.Properties = properties
	l.attachAnswered = true
	l.session.conn.writeFrameLocked(l.session.channel, reply.append)
	if l.receiver != nil {
		l.topUpLocked()
	}
}

// RefuseAttach refuses a deferred attach as ConnHandler.Attach's error
// would: an attach reply with a null terminus, then a closing detach with
// err. The handler is not told (it refused).
func (l *Link) RefuseAttach(err error) {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		err = Errorf(ErrCondInternalError, "attach refused")
	}
	if l.answerEarlyLocked(&earlyReply{refuse: err}) {
		return
	}
	if !l.attachPending || l.detachSent || l.detached || l.session.ended {
		return
	}
	l.attachPending = false
	l.refuseLocked(l.pendingReply, err)
}

// answerEarlyLocked keeps r for onAttach when the handler deferred the
// reply and answers before ConnHandler.Attach has returned (the reply is
// not pending yet): the goroutine DeferAttach's caller starts may finish
// first, and a reply dropped then left the peer's attach unanswered for
// good. It reports whether it kept r.
func (l *Link) answerEarlyLocked(r *earlyReply) bool {
	if !l.deferAttach || l.attachPending || l.attachAnswered || l.early != nil || l.detachSent || l.detached || l.session.ended {
		return false
	}
	l.early = r
	return true
}

// refuseLocked refuses the attach the way clients expect (spec 2.6.3):
// attach with a null terminus on our side, then detach with the reason.
func (l *Link) refuseLocked(reply Attach, err error) {
	c := l.session.conn
	if l.attach.Role == RoleSender {
		reply.Target = nil
	} else {
		reply.Source = nil
	}
	l.attachAnswered = true
	c.writeFrameLocked(l.session.channel, reply.append)
	detach := Detach{Handle: l.handle, Closed: true, Error: asError(err)}
	c.writeFrameLocked(l.session.channel, detach.append)
	l.detachSent, l.detached = true, true
}

func (s *Session) onAttach(d *decoder) error {
	l := &Link{session: s}
	if err := l.attach.decode(d); err != nil {
		return err
	}
	l.handle = l.attach.Handle
	c := s.conn
	c.mu.Lock()
	if l.attach.Handle > handleMax {
		c.mu.Unlock()
		// Spec 2.7.2: a handle above handle-max is a framing error.
		return framingErrorf("handle %d exceeds handle-max %d", l.attach.Handle, handleMax)
	}
	if _, busy := s.links[l.handle]; busy {
		c.mu.Unlock()
		return Errorf(ErrCondHandleInUse, "handle %d is already attached", l.handle)
	}
	s.links[l.handle] = l
	c.linkCount++
	tooMany := c.linkCount > maxLinksPerConn
	l.maxMessageSize = c.srv.maxMessageSize()
	l.creditWindow = c.srv.linkCredit()
	c.mu.Unlock()

	var h LinkHandler
	var err error
	if tooMany {
		err = Errorf(ErrCondResourceLimitExceeded, "more than %d links on one connection", maxLinksPerConn)
	} else {
		h, err = c.handler.Attach(l)
	}
	if err == nil {
		if l.attach.Role == RoleSender {
			if l.receiver, _ = h.(MessageHandler); l.receiver == nil {
				err = Errorf(ErrCondNotImplemented, "this node does not accept messages")
			}
		} else if l.sender, _ = h.(SenderHandler); l.sender == nil {
			err = Errorf(ErrCondNotImplemented, "this node does not send messages")
		}
	}
	l.handler = h

	c.mu.Lock()
	defer c.mu.Unlock()
	reply := Attach{
		Name:          l.attach.Name,
		Handle:        l.handle,
		Role:          !l.attach.Role,
		SndSettleMode: l.attach.SndSettleMode,
		RcvSettleMode: l.attach.RcvSettleMode,
		Source:        l.attach.Source,
		Target:        l.attach.Target,
	}
	if err != nil {
		l.refuseLocked(reply, err)
		return nil
	}
	l.sndSettle, l.rcvSettle = SenderSettleMixed, ReceiverSettleFirst
	if m := l.attach.SndSettleMode; m != nil {
		l.sndSettle = *m
	}
	if m := l.attach.RcvSettleMode; m != nil {
		l.rcvSettle = *m
	}
	reply.MaxMessageSize = l.maxMessageSize
	if l.deferAttach {
		switch r := l.early; {
		case r == nil:
			l.attachPending, l.pendingReply = true, reply
		case r.refuse != nil:
			l.refuseLocked(reply, r.refuse)
		default:
			l.completeLocked(reply, r.source, r.properties)
		}
		l.early = nil
		return nil
	}
	c.writeFrameLocked(s.channel, reply.append)
	if l.receiver != nil {
		l.topUpLocked()
	}
	return nil
}

// markDetachedLocked records that the link is over and reports whether
// the handler still has to be told.
func (l *Link) markDetachedLocked() bool {
	if l.detached {
		return false
	}
	l.detached = true
	l.dropAsmLocked()
	return l.handler != nil
}

// Detach detaches the link from our side (closing it) with an optional
// error for the peer. The handler's Detached follows when the peer answers
// or the session ends.
func (l *Link) Detach(err error) {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.detachSent || l.detached || l.session.ended {
		return
	}
	l.detachSent = true
	l.detachErr = err
	l.dropAsmLocked() // transfers still in flight are ignored, so nothing refills it
	p := Detach{Handle: l.handle, Closed: true, Error: asError(err)}
	c.writeFrameLocked(l.session.channel, p.append)
}

// HoldDetachReply makes the engine hold back its answer to the peer's
// detach of this link until SendDetachReply: the handler has work to
// finish before the peer may take the link's close for done (a session
// receiver gives its session back first, so that the client that closed
// it can accept the session again at once). Call it before the link can
// be detached, e.g. in ConnHandler.Attach.
func (l *Link) HoldDetachReply() {
	c := l.session.conn
	c.mu.Lock()
	l.holdDetach = true
	c.mu.Unlock()
}

// SendDetachReply sends the answer HoldDetachReply held back, if the peer
// detached and the session still runs; otherwise it does nothing.
func (l *Link) SendDetachReply() {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := l.heldDetach
	l.heldDetach = nil
	if reply == nil || l.session.ended || c.closing {
		return
	}
	c.writeFrameLocked(l.session.channel, reply.append)
}

// linkFlowLocked builds a flow frame carrying the link's state.
func (l *Link) linkFlowLocked() Flow {
	f := l.session.flowLocked()
	f.Handle, f.HasHandle = l.handle, true
	f.HasDeliveryCount, f.HasLinkCredit = true, true
	if l.receiver != nil {
		f.DeliveryCount, f.LinkCredit = l.deliveryCount, l.credit
	} else {
		f.DeliveryCount, f.LinkCredit = l.sendDeliveryCount, l.sendCredit
		f.Drain = l.drainRequested
	}
	return f
}

// onFlowLocked applies the peer's link flow. For links where we send it
// returns the new credit and whether the handler should hear of it.
func (l *Link) onFlowLocked(p *Flow) (credit uint32, drain, notify bool) {
	if l.detachSent || l.detached {
		return 0, false, false
	}
	if l.sender != nil {
		if p.HasLinkCredit {
			// Spec 2.6.7: credit = delivery-count(rcv) + link-credit(rcv) -
			// delivery-count(snd); the receiver's count defaults to our
			// initial delivery count, 0.
			var rcvCount uint32
			if p.HasDeliveryCount {
				rcvCount = p.DeliveryCount
			}
			l.sendCredit = rcvCount + p.LinkCredit - l.sendDeliveryCount
			if int32(l.sendCredit) < 0 {
				l.sendCredit = 0
			}
			l.drainRequested = p.Drain
			notify = true
		}
	}
	if p.Echo {
		f := l.linkFlowLocked()
		l.session.writeFlowLocked(&f)
	}
	return l.sendCredit, l.drainRequested, notify
}

// topUpLocked grants the peer more credit once enough of the window is free
// again: in steps of a quarter window, so that flow frames stay rare.
func (l *Link) topUpLocked() {
	if l.receiver == nil || l.detachSent || l.detached {
		return
	}
	var target uint32
	if l.creditWindow > l.outstanding {
		target = l.creditWindow - l.outstanding
	}
	if target <= l.credit {
		return
	}
	if l.credit > 0 && target-l.credit < max(1, l.creditWindow/4) {
		return
	}
	l.credit = target
	f := l.linkFlowLocked()
	l.session.writeFlowLocked(&f)
}

// onTransferLocked takes one transfer frame. It returns the delivery to
// hand to the handler once a message is complete; an error detaches the
// link.
func (l *Link) onTransferLocked(p *Transfer, payload []byte) (*Delivery, error) {
	if l.detachSent || l.detached {
		return nil, nil // in flight before the peer saw our detach
	}
	if l.receiver == nil {
		return nil, Errorf(ErrCondIllegalState, "transfer on a link where the peer is the receiver")
	}
	if p.Aborted {
		l.dropAsmLocked()
		return nil, nil
	}
	if !l.asmActive {
		if !p.HasDeliveryID {
			return nil, Errorf(ErrCondInvalidField, "first transfer of a delivery without delivery-id")
		}
		if l.credit == 0 {
			return nil, Errorf(ErrCondTransferLimitExceeded, "transfer without link credit")
		}
		l.credit--
		l.deliveryCount++
		l.asmID, l.asmFormat, l.asmSettled = p.DeliveryID, p.MessageFormat, p.Settled
		l.asmTag = append(l.asmTag[:0], p.DeliveryTag...)
	} else {
		l.asmSettled = l.asmSettled || p.Settled
	}
	if l.sndSettle == SenderSettleSettled {
		l.asmSettled = true
	}
	size := uint64(len(l.asm)) + uint64(len(payload))
	if l.maxMessageSize > 0 && size > l.maxMessageSize {
		l.dropAsmLocked()
		return nil, Errorf(ErrCondMessageSizeExceeded, "message of more than %d bytes exceeds the link's maximum of %d", size, l.maxMessageSize)
	}
	d := &l.session.conn.delivery
	if p.More || l.asmActive {
		if err := l.reserveAsmLocked(int(size)); err != nil {
			l.dropAsmLocked()
			l.session.conn.srv.partialRefusals.Add(1)
			return nil, err
		}
		l.asmActive = true
		l.asm = append(l.asm, payload...)
		if p.More {
			return nil, nil
		}
	}
	*d = Delivery{ID: l.asmID, Tag: l.asmTag, Format: l.asmFormat, Settled: l.asmSettled, Payload: payload}
	if l.asmActive {
		d.Payload = l.asm
	}
	if !d.Settled {
		l.outstanding++
	}
	return d, nil
}

// finishMessageLocked runs after the handler took a message.
func (l *Link) finishMessageLocked() {
	l.dropAsmLocked()
	l.topUpLocked()
}

// reserveAsmLocked makes room for need bytes of the message being
// reassembled, charging what the buffer grows by to the connection's and
// the server's budgets. Growth doubles but stops at the link's maximum
// message size, so a maximal message holds no more than that.
func (l *Link) reserveAsmLocked(need int) error {
	old := cap(l.asm)
	if need <= old {
		return nil
	}
	grow := max(need, 2*old)
	if m := l.maxMessageSize; m > 0 && uint64(grow) > m {
		grow = max(need, int(m))
	}
	if err := l.chargeLocked(int64(grow - old)); err != nil {
		if grow == need {
			return err
		}
		grow = need
		if err := l.chargeLocked(int64(grow - old)); err != nil {
			return err
		}
	}
	b := make([]byte, len(l.asm), grow)
	copy(b, l.asm)
	l.asm = b
	return nil
}

// chargeLocked adds n bytes to what the connection and the server hold in
// unfinished messages, unless that would take either past its budget.
func (l *Link) chargeLocked(n int64) error {
	c := l.session.conn
	srv := c.srv
	if budget := srv.maxConnPartialBytes(); c.partial+n > budget {
		return Errorf(ErrCondResourceLimitExceeded, "unfinished messages on this connection would hold %d bytes, over its budget of %d", c.partial+n, budget)
	}
	if budget, total := srv.maxPartialBytes(), srv.partial.Add(n); total > budget {
		srv.partial.Add(-n)
		return Errorf(ErrCondResourceLimitExceeded, "unfinished messages on this server would hold %d bytes, over its budget of %d", total, budget)
	}
	c.partial += n
	return nil
}

// dropAsmLocked ends the reassembly of a message (finished, aborted, or
// its link gone) and gives back what its buffer was charged. The buffer
// is not kept for the next message: an idle link pins no memory.
func (l *Link) dropAsmLocked() {
	if n := int64(cap(l.asm)); n > 0 {
		c := l.session.conn
		c.partial -= n
		c.srv.partial.Add(-n)
	}
	l.asm, l.asmActive = nil, false
}

// Settle settles a delivery with an outcome. On a link where the peer
// sends it settles one of the peer's messages; on a link where the peer
// receives it confirms the peer's disposition (receiver settle mode
// second).
func (l *Link) Settle(deliveryID uint32, state DeliveryState) error {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.detachSent || l.detached || l.session.ended || c.closing {
		return ErrLinkClosed
	}
	if l.receiver != nil {
		if l.outstanding == 0 {
			return fmt.Errorf("%w: %d", ErrUnknownDelivery, deliveryID)
		}
		l.outstanding--
		// In receiver settle mode second the peer settles after seeing our
		// outcome.
		settled := l.rcvSettle != ReceiverSettleSecond
		l.session.addRunLocked(RoleReceiver, deliveryID, settled, state)
		l.topUpLocked()
		return nil
	}
	if l.session.unsettled[deliveryID] != l {
		return fmt.Errorf("%w: %d", ErrUnknownDelivery, deliveryID)
	}
	delete(l.session.unsettled, deliveryID)
	l.session.addRunLocked(RoleSender, deliveryID, true, state)
	return nil
}

// SendState returns the credit the peer granted for Send and whether it
// asked to drain it. Unlike the values a Flow call carries, which other
// goroutines' sends may already have used by the time the handler sees
// them, these are current.
func (l *Link) SendState() (credit uint32, drain bool) {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.sendCredit, l.drainRequested
}

// Drain answers a drain request when the handler has nothing more to send:
// the remaining credit is used up and the peer is told (spec 2.6.7).
func (l *Link) Drain() {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.sender == nil || !l.drainRequested || l.detachSent || l.detached {
		return
	}
	l.sendDeliveryCount += l.sendCredit
	l.sendCredit = 0
	f := l.linkFlowLocked()
	l.session.writeFlowLocked(&f)
	l.drainRequested = false
}

// outgoing is a delivery waiting for the peer's session window.
type outgoing struct {
	link    *Link
	id      uint32
	tag     []byte
	payload []byte
	sent    int // payload bytes already framed
	settled bool
	first   bool // no frame of it has gone out yet
}

// Send sends one message on a link where the peer receives, consuming one
// credit. tag and payload are copied before Send returns. It returns the
// delivery id, which the peer's Disposition and Settle refer to.
func (l *Link) Send(tag, payload []byte, settled bool) (uint32, error) {
	c := l.session.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.sender == nil {
		return 0, Errorf(ErrCondIllegalState, "send on a link where the peer sends")
	}
	if l.detachSent || l.detached || l.session.ended || c.closing {
		return 0, ErrLinkClosed
	}
	if l.sendCredit == 0 {
		return 0, ErrNoCredit
	}
	if limit := l.attach.MaxMessageSize; limit != 0 && uint64(len(payload)) > limit {
		return 0, Errorf(ErrCondMessageSizeExceeded, "message of %d bytes exceeds the receiver's maximum of %d", len(payload), limit)
	}
	switch l.sndSettle {
	case SenderSettleSettled:
		settled = true
	case SenderSettleUnsettled:
		settled = false
	}
	s := l.session
	l.sendCredit--
	l.sendDeliveryCount++
	id := s.nextDeliveryID
	s.nextDeliveryID++
	if !settled {
		s.unsettled[id] = l
	}
	o := outgoing{link: l, id: id, tag: tag, payload: payload, settled: settled, first: true}
	if len(s.blocked) == 0 {
		s.frameLocked(&o)
	}
	if o.first || o.sent < len(o.payload) {
		// The peer's window is closed: keep a copy until it opens.
		held := o
		held.tag = append([]byte(nil), tag...)
		held.payload = append([]byte(nil), payload...)
		s.blocked = append(s.blocked, &held)
	}
	return id, nil
}

// frameLocked writes as many transfer frames of o as the peer's session
// window allows.
func (s *Session) frameLocked(o *outgoing) {
	c := s.conn
	if c.closing {
		o.first, o.sent = false, len(o.payload)
		return
	}
	for s.remoteIncomingWindow > 0 && (o.first || o.sent < len(o.payload)) {
		t := Transfer{Handle: o.link.handle}
		if o.first {
			t.DeliveryID, t.HasDeliveryID = o.id, true
			t.DeliveryTag = o.tag
			if t.DeliveryTag == nil {
				t.DeliveryTag = []byte{}
			}
			t.MessageFormat, t.HasMessageFormat = 0, true
			t.Settled = o.settled
		}
		c.flushRunsLocked()
		// Encode as the last frame first, which it usually is; re-encode
		// with more=true when the rest does not fit.
		b, start := appendFrameHeader(c.wbuf, frameTypeAMQP, s.channel)
		b = t.append(b)
		chunk := len(o.payload) - o.sent
		if room := int(c.peerMaxFrame) - (len(b) - start); chunk > room {
			t.More = true
			b = t.append(b[:start+frameHeaderSize])
			chunk = max(int(c.peerMaxFrame)-(len(b)-start), 1)
		}
		b = append(b, o.payload[o.sent:o.sent+chunk]...)
		c.wbuf = finishFrame(b, start)
		o.sent += chunk
		o.first = false
		s.nextOutgoingID++
		s.remoteIncomingWindow--
	}
	c.signal()
}

// sendBlockedLocked frames waiting deliveries after the window opened.
func (s *Session) sendBlockedLocked() {
	for len(s.blocked) > 0 && s.remoteIncomingWindow > 0 {
		o := s.blocked[0]
		if o.link.detached || o.link.detachSent {
			s.blocked = s.blocked[1:]
			continue
		}
		s.frameLocked(o)
		if o.first || o.sent < len(o.payload) {
			return
		}
		s.blocked[0] = nil
		s.blocked = s.blocked[1:]
	}
}
