package amqp

import "math"

// Descriptor codes of the spec's composite types (domain 0x00000000).
const (
	descOpen        = 0x10
	descBegin       = 0x11
	descAttach      = 0x12
	descFlow        = 0x13
	descTransfer    = 0x14
	descDisposition = 0x15
	descDetach      = 0x16
	descEnd         = 0x17
	descClose       = 0x18
	descError       = 0x1d

	descReceived = 0x23
	descAccepted = 0x24
	descRejected = 0x25
	descReleased = 0x26
	descModified = 0x27
	descSource   = 0x28
	descTarget   = 0x29

	descSASLMechanisms = 0x40
	descSASLInit       = 0x41
	descSASLChallenge  = 0x42
	descSASLResponse   = 0x43
	descSASLOutcome    = 0x44

	// 0x70 to 0x78, a message's sections, are exported: SectionHeader to
	// SectionFooter (sections.go).
)

// Role of a link endpoint, as the attach frame's role field encodes it.
type Role bool

const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

func (r Role) String() string {
	if r == RoleReceiver {
		return "receiver"
	}
	return "sender"
}

// Settle modes (spec 2.8.2 and 2.8.3).
const (
	SenderSettleUnsettled uint8 = 0
	SenderSettleSettled   uint8 = 1
	SenderSettleMixed     uint8 = 2

	ReceiverSettleFirst  uint8 = 0
	ReceiverSettleSecond uint8 = 1
)

// Open is the first performative on a connection (spec 2.7.1).
type Open struct {
	ContainerID         string
	Hostname            string
	MaxFrameSize        uint32 // default 4294967295
	ChannelMax          uint16 // default 65535
	IdleTimeout         uint32 // milliseconds; 0 means none
	OutgoingLocales     []Symbol
	IncomingLocales     []Symbol
	OfferedCapabilities []Symbol
	DesiredCapabilities []Symbol
	Properties          Map
}

func (o *Open) decode(d *decoder) error {
	o.MaxFrameSize, o.ChannelMax = math.MaxUint32, math.MaxUint16
	f := d.openFields()
	f.required(f.str(&o.ContainerID), "container-id")
	f.str(&o.Hostname)
	f.u32(&o.MaxFrameSize)
	f.u16(&o.ChannelMax)
	f.u32(&o.IdleTimeout)
	f.symbols(&o.OutgoingLocales)
	f.symbols(&o.IncomingLocales)
	f.symbols(&o.OfferedCapabilities)
	f.symbols(&o.DesiredCapabilities)
	f.mapField(&o.Properties)
	return f.done()
}

func (o *Open) append(b []byte) []byte {
	b, f := beginFields(b, descOpen)
	b = appendString(b, o.ContainerID)
	f.field(b, false)
	b = appendOptString(b, f, o.Hostname)
	b = appendUint(b, o.MaxFrameSize)
	f.field(b, o.MaxFrameSize == math.MaxUint32)
	b = appendUshort(b, o.ChannelMax)
	f.field(b, o.ChannelMax == math.MaxUint16)
	b = appendOptUint(b, f, o.IdleTimeout)
	b = appendOptSymbols(b, f, o.OutgoingLocales)
	b = appendOptSymbols(b, f, o.IncomingLocales)
	b = appendOptSymbols(b, f, o.OfferedCapabilities)
	b = appendOptSymbols(b, f, o.DesiredCapabilities)
	b = appendOptMap(b, f, o.Properties)
	return f.end(b)
}

// Begin starts a session (spec 2.7.2).
type Begin struct {
	RemoteChannel       uint16
	HasRemoteChannel    bool
	NextOutgoingID      uint32
	IncomingWindow      uint32
	OutgoingWindow      uint32
	HandleMax           uint32 // default 4294967295
	OfferedCapabilities []Symbol
	DesiredCapabilities []Symbol
	Properties          Map
}

func (p *Begin) decode(d *decoder) error {
	p.HandleMax = math.MaxUint32
	f := d.openFields()
	p.HasRemoteChannel = f.u16(&p.RemoteChannel)
	f.required(f.u32(&p.NextOutgoingID), "next-outgoing-id")
	f.required(f.u32(&p.IncomingWindow), "incoming-window")
	f.required(f.u32(&p.OutgoingWindow), "outgoing-window")
	f.u32(&p.HandleMax)
	f.symbols(&p.OfferedCapabilities)
	f.symbols(&p.DesiredCapabilities)
	f.mapField(&p.Properties)
	return f.done()
}

func (p *Begin) append(b []byte) []byte {
	b, f := beginFields(b, descBegin)
	if p.HasRemoteChannel {
		b = appendUshort(b, p.RemoteChannel)
	} else {
		b = appendNull(b)
	}
	f.field(b, !p.HasRemoteChannel)
	b = appendUint(b, p.NextOutgoingID)
	f.field(b, false)
	b = appendUint(b, p.IncomingWindow)
	f.field(b, false)
	b = appendUint(b, p.OutgoingWindow)
	f.field(b, false)
	b = appendUint(b, p.HandleMax)
	f.field(b, p.HandleMax == math.MaxUint32)
	b = appendOptSymbols(b, f, p.OfferedCapabilities)
	b = appendOptSymbols(b, f, p.DesiredCapabilities)
	b = appendOptMap(b, f, p.Properties)
	return f.end(b)
}

// Attach attaches a link to a session (spec 2.7.3). The settle modes are
// pointers because an absent mode and an explicit default are different
// bytes on the wire, and the SDKs want their own choice echoed.
type Attach struct {
	Name                 string
	Handle               uint32
	Role                 Role
	SndSettleMode        *uint8
	RcvSettleMode        *uint8
	Source               *Source
	Target               *Target
	Unsettled            Map
	IncompleteUnsettled  bool
	InitialDeliveryCount uint32
	MaxMessageSize       uint64 // 0 means no limit
	OfferedCapabilities  []Symbol
	DesiredCapabilities  []Symbol
	Properties           Map
}

func (p *Attach) decode(d *decoder) error {
	f := d.openFields()
	f.required(f.str(&p.Name), "name")
	f.required(f.u32(&p.Handle), "handle")
	var role bool
	f.required(f.boolean(&role), "role")
	p.Role = Role(role)
	var mode uint8
	if f.u8(&mode) {
		if mode > SenderSettleMixed {
			f.fail(decodeErrorf("snd-settle-mode %d", mode))
		}
		p.SndSettleMode = ptr(mode)
	}
	if f.u8(&mode) {
		if mode > ReceiverSettleSecond {
			f.fail(decodeErrorf("rcv-settle-mode %d", mode))
		}
		p.RcvSettleMode = ptr(mode)
	}
	if f.next() {
		p.Source = new(Source)
		f.fail(p.Source.decode(d))
	}
	if f.next() {
		p.Target = new(Target)
		f.fail(p.Target.decode(d))
	}
	f.mapField(&p.Unsettled)
	f.boolean(&p.IncompleteUnsettled)
	f.u32(&p.InitialDeliveryCount)
	f.u64(&p.MaxMessageSize)
	f.symbols(&p.OfferedCapabilities)
	f.symbols(&p.DesiredCapabilities)
	f.mapField(&p.Properties)
	return f.done()
}

func (p *Attach) append(b []byte) []byte {
	b, f := beginFields(b, descAttach)
	b = appendString(b, p.Name)
	f.field(b, false)
	b = appendUint(b, p.Handle)
	f.field(b, false)
	b = appendBool(b, bool(p.Role))
	f.field(b, false)
	b = appendOptUbyte(b, f, p.SndSettleMode)
	b = appendOptUbyte(b, f, p.RcvSettleMode)
	if p.Source != nil {
		b = p.Source.append(b)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.Source == nil)
	if p.Target != nil {
		b = p.Target.append(b)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.Target == nil)
	b = appendOptMap(b, f, p.Unsettled)
	b = appendOptBool(b, f, p.IncompleteUnsettled)
	// initial-delivery-count is mandatory from a sender and meaningless from
	// a receiver.
	if p.Role == RoleSender {
		b = appendUint(b, p.InitialDeliveryCount)
		f.field(b, false)
	} else {
		b = appendNull(b)
		f.field(b, true)
	}
	if p.MaxMessageSize != 0 {
		b = appendUlong(b, p.MaxMessageSize)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.MaxMessageSize == 0)
	b = appendOptSymbols(b, f, p.OfferedCapabilities)
	b = appendOptSymbols(b, f, p.DesiredCapabilities)
	b = appendOptMap(b, f, p.Properties)
	return f.end(b)
}

// Flow updates session windows and, with a handle, link credit (spec 2.7.4).
type Flow struct {
	NextIncomingID    uint32
	HasNextIncomingID bool
	IncomingWindow    uint32
	NextOutgoingID    uint32
	OutgoingWindow    uint32
	Handle            uint32
	HasHandle         bool
	DeliveryCount     uint32
	HasDeliveryCount  bool
	LinkCredit        uint32
	HasLinkCredit     bool
	Available         uint32
	HasAvailable      bool
	Drain             bool
	Echo              bool
	Properties        Map
}

func (p *Flow) decode(d *decoder) error {
	*p = Flow{}
	f := d.openFields()
	p.HasNextIncomingID = f.u32(&p.NextIncomingID)
	f.required(f.u32(&p.IncomingWindow), "incoming-window")
	f.required(f.u32(&p.NextOutgoingID), "next-outgoing-id")
	f.required(f.u32(&p.OutgoingWindow), "outgoing-window")
	p.HasHandle = f.u32(&p.Handle)
	p.HasDeliveryCount = f.u32(&p.DeliveryCount)
	p.HasLinkCredit = f.u32(&p.LinkCredit)
	p.HasAvailable = f.u32(&p.Available)
	f.boolean(&p.Drain)
	f.boolean(&p.Echo)
	f.mapField(&p.Properties)
	return f.done()
}

func (p *Flow) append(b []byte) []byte {
	b, f := beginFields(b, descFlow)
	b = appendOptUintHas(b, f, p.NextIncomingID, p.HasNextIncomingID)
	b = appendUint(b, p.IncomingWindow)
	f.field(b, false)
	b = appendUint(b, p.NextOutgoingID)
	f.field(b, false)
	b = appendUint(b, p.OutgoingWindow)
	f.field(b, false)
	b = appendOptUintHas(b, f, p.Handle, p.HasHandle)
	b = appendOptUintHas(b, f, p.DeliveryCount, p.HasDeliveryCount)
	b = appendOptUintHas(b, f, p.LinkCredit, p.HasLinkCredit)
	b = appendOptUintHas(b, f, p.Available, p.HasAvailable)
	b = appendOptBool(b, f, p.Drain)
	b = appendOptBool(b, f, p.Echo)
	b = appendOptMap(b, f, p.Properties)
	return f.end(b)
}

// Transfer carries (a frame of) a message (spec 2.7.5). DeliveryTag points
// into the frame buffer.
type Transfer struct {
	Handle           uint32
	DeliveryID       uint32
	HasDeliveryID    bool
	DeliveryTag      []byte
	MessageFormat    uint32
	HasMessageFormat bool
	Settled          bool
	More             bool
	RcvSettleMode    uint8
	HasRcvSettleMode bool
	State            DeliveryState
	Resume           bool
	Aborted          bool
	Batchable        bool
}

func (p *Transfer) decode(d *decoder) error {
	*p = Transfer{}
	f := d.openFields()
	f.required(f.u32(&p.Handle), "handle")
	p.HasDeliveryID = f.u32(&p.DeliveryID)
	f.binary(&p.DeliveryTag)
	p.HasMessageFormat = f.u32(&p.MessageFormat)
	f.boolean(&p.Settled)
	f.boolean(&p.More)
	p.HasRcvSettleMode = f.u8(&p.RcvSettleMode)
	f.state(&p.State)
	f.boolean(&p.Resume)
	f.boolean(&p.Aborted)
	f.boolean(&p.Batchable)
	if err := f.done(); err != nil {
		return err
	}
	if len(p.DeliveryTag) > 32 {
		return decodeErrorf("delivery-tag of %d bytes exceeds 32", len(p.DeliveryTag))
	}
	return nil
}

func (p *Transfer) append(b []byte) []byte {
	b, f := beginFields(b, descTransfer)
	b = appendUint(b, p.Handle)
	f.field(b, false)
	b = appendOptUintHas(b, f, p.DeliveryID, p.HasDeliveryID)
	if p.DeliveryTag != nil {
		b = appendBinary(b, p.DeliveryTag)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.DeliveryTag == nil)
	b = appendOptUintHas(b, f, p.MessageFormat, p.HasMessageFormat)
	b = appendOptBool(b, f, p.Settled)
	b = appendOptBool(b, f, p.More)
	if p.HasRcvSettleMode {
		b = appendUbyte(b, p.RcvSettleMode)
	} else {
		b = appendNull(b)
	}
	f.field(b, !p.HasRcvSettleMode)
	b = appendState(b, f, p.State)
	b = appendOptBool(b, f, p.Resume)
	b = appendOptBool(b, f, p.Aborted)
	b = appendOptBool(b, f, p.Batchable)
	return f.end(b)
}

// Disposition informs the peer of delivery state changes (spec 2.7.6).
type Disposition struct {
	Role      Role
	First     uint32
	Last      uint32
	HasLast   bool
	Settled   bool
	State     DeliveryState
	Batchable bool
}

func (p *Disposition) decode(d *decoder) error {
	*p = Disposition{}
	f := d.openFields()
	var role bool
	f.required(f.boolean(&role), "role")
	p.Role = Role(role)
	f.required(f.u32(&p.First), "first")
	p.HasLast = f.u32(&p.Last)
	f.boolean(&p.Settled)
	f.state(&p.State)
	f.boolean(&p.Batchable)
	return f.done()
}

func (p *Disposition) append(b []byte) []byte {
	b, f := beginFields(b, descDisposition)
	b = appendBool(b, bool(p.Role))
	f.field(b, false)
	b = appendUint(b, p.First)
	f.field(b, false)
	b = appendOptUintHas(b, f, p.Last, p.HasLast && p.Last != p.First)
	b = appendOptBool(b, f, p.Settled)
	b = appendState(b, f, p.State)
	b = appendOptBool(b, f, p.Batchable)
	return f.end(b)
}

// Detach detaches a link (spec 2.7.7).
type Detach struct {
	Handle uint32
	Closed bool
	Error  *Error
}

func (p *Detach) decode(d *decoder) error {
	*p = Detach{}
	f := d.openFields()
	f.required(f.u32(&p.Handle), "handle")
	f.boolean(&p.Closed)
	f.errorField(&p.Error)
	return f.done()
}

func (p *Detach) append(b []byte) []byte {
	b, f := beginFields(b, descDetach)
	b = appendUint(b, p.Handle)
	f.field(b, false)
	b = appendOptBool(b, f, p.Closed)
	b = appendOptError(b, f, p.Error)
	return f.end(b)
}

// End ends a session (spec 2.7.8); Close closes a connection (2.7.9).
// Both carry only an optional error.
type End struct{ Error *Error }
type Close struct{ Error *Error }

func decodeErrorOnly(d *decoder) (*Error, error) {
	f := d.openFields()
	var e *Error
	f.errorField(&e)
	return e, f.done()
}

func appendErrorOnly(b []byte, descriptor uint64, e *Error) []byte {
	b, f := beginFields(b, descriptor)
	b = appendOptError(b, f, e)
	return f.end(b)
}

// Source and Target describe the nodes at the ends of a link (spec 3.5).
type Source struct {
	Address               string
	Durable               uint32
	ExpiryPolicy          Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties Map
	DistributionMode      Symbol
	Filter                Map
	DefaultOutcome        any
	Outcomes              []Symbol
	Capabilities          []Symbol
}

func (s *Source) decode(d *decoder) error {
	if err := d.expectDescribed(descSource, "source"); err != nil {
		return err
	}
	f := d.openFields()
	f.str(&s.Address)
	f.u32(&s.Durable)
	f.sym(&s.ExpiryPolicy)
	f.u32(&s.Timeout)
	f.boolean(&s.Dynamic)
	f.mapField(&s.DynamicNodeProperties)
	f.sym(&s.DistributionMode)
	f.mapField(&s.Filter)
	f.value(&s.DefaultOutcome)
	f.symbols(&s.Outcomes)
	f.symbols(&s.Capabilities)
	return f.done()
}

func (s *Source) append(b []byte) []byte {
	b, f := beginFields(b, descSource)
	b = appendOptString(b, f, s.Address)
	b = appendOptUint(b, f, s.Durable)
	b = appendOptSymbol(b, f, s.ExpiryPolicy)
	b = appendOptUint(b, f, s.Timeout)
	b = appendOptBool(b, f, s.Dynamic)
	b = appendOptMap(b, f, s.DynamicNodeProperties)
	b = appendOptSymbol(b, f, s.DistributionMode)
	b = appendOptMap(b, f, s.Filter)
	// default-outcome comes from the peer when we echo its source: a value
	// we cannot encode back becomes null rather than a panic.
	if enc, err := appendValue(b, s.DefaultOutcome); err == nil {
		b = enc
		f.field(b, s.DefaultOutcome == nil)
	} else {
		b = appendNull(b)
		f.field(b, true)
	}
	b = appendOptSymbols(b, f, s.Outcomes)
	b = appendOptSymbols(b, f, s.Capabilities)
	return f.end(b)
}

type Target struct {
	Address               string
	Durable               uint32
	ExpiryPolicy          Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties Map
	Capabilities          []Symbol
}

func (t *Target) decode(d *decoder) error {
	if err := d.expectDescribed(descTarget, "target"); err != nil {
		return err
	}
	f := d.openFields()
	f.str(&t.Address)
	f.u32(&t.Durable)
	f.sym(&t.ExpiryPolicy)
	f.u32(&t.Timeout)
	f.boolean(&t.Dynamic)
	f.mapField(&t.DynamicNodeProperties)
	f.symbols(&t.Capabilities)
	return f.done()
}

func (t *Target) append(b []byte) []byte {
	b, f := beginFields(b, descTarget)
	b = appendOptString(b, f, t.Address)
	b = appendOptUint(b, f, t.Durable)
	b = appendOptSymbol(b, f, t.ExpiryPolicy)
	b = appendOptUint(b, f, t.Timeout)
	b = appendOptBool(b, f, t.Dynamic)
	b = appendOptMap(b, f, t.DynamicNodeProperties)
	b = appendOptSymbols(b, f, t.Capabilities)
	return f.end(b)
}

// Helpers for optional fields: the zero value is sent as null, which the
// trailing-null trimming of fieldList then removes entirely.

func appendOptString(b []byte, f *fieldList, v string) []byte {
	if v == "" {
		b = appendNull(b)
	} else {
		b = appendString(b, v)
	}
	f.field(b, v == "")
	return b
}

func appendOptSymbol(b []byte, f *fieldList, v Symbol) []byte {
	if v == "" {
		b = appendNull(b)
	} else {
		b = appendSymbol(b, v)
	}
	f.field(b, v == "")
	return b
}

func appendOptUint(b []byte, f *fieldList, v uint32) []byte {
	return appendOptUintHas(b, f, v, v != 0)
}

func appendOptUintHas(b []byte, f *fieldList, v uint32, has bool) []byte {
	if has {
		b = appendUint(b, v)
	} else {
		b = appendNull(b)
	}
	f.field(b, !has)
	return b
}

func appendOptUbyte(b []byte, f *fieldList, v *uint8) []byte {
	if v != nil {
		b = appendUbyte(b, *v)
	} else {
		b = appendNull(b)
	}
	f.field(b, v == nil)
	return b
}

func appendOptBool(b []byte, f *fieldList, v bool) []byte {
	if v {
		b = appendBool(b, true)
	} else {
		b = appendNull(b)
	}
	f.field(b, !v)
	return b
}

func appendOptSymbols(b []byte, f *fieldList, v []Symbol) []byte {
	b = appendSymbols(b, v)
	f.field(b, len(v) == 0)
	return b
}

func appendOptMap(b []byte, f *fieldList, m Map) []byte {
	if m == nil {
		b = appendNull(b)
	} else {
		enc, err := appendMap(b, m)
		if err != nil {
			// Maps from our own code hold only encodable values; a bad one is
			// a programming error, but the peer must still get a frame.
			enc = appendNull(b)
		}
		b = enc
	}
	f.field(b, m == nil)
	return b
}

func appendOptError(b []byte, f *fieldList, e *Error) []byte {
	if e != nil {
		b = e.append(b)
	} else {
		b = appendNull(b)
	}
	f.field(b, e == nil)
	return b
}

func appendState(b []byte, f *fieldList, s DeliveryState) []byte {
	if s != nil {
		b = s.appendState(b)
	} else {
		b = appendNull(b)
	}
	f.field(b, s == nil)
	return b
}
