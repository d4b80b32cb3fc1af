package amqp

import (
	"errors"
	"fmt"
)

// Error conditions defined by the spec (2.8.15 to 2.8.18). Applications may
// use their own conditions as well (Service Bus uses com.microsoft:*).
const (
	ErrCondInternalError         Symbol = "amqp:internal-error"
	ErrCondNotFound              Symbol = "amqp:not-found"
	ErrCondUnauthorizedAccess    Symbol = "amqp:unauthorized-access"
	ErrCondDecodeError           Symbol = "amqp:decode-error"
	ErrCondResourceLimitExceeded Symbol = "amqp:resource-limit-exceeded"
	ErrCondNotAllowed            Symbol = "amqp:not-allowed"
	ErrCondInvalidField          Symbol = "amqp:invalid-field"
	ErrCondNotImplemented        Symbol = "amqp:not-implemented"
	ErrCondResourceLocked        Symbol = "amqp:resource-locked"
	ErrCondPreconditionFailed    Symbol = "amqp:precondition-failed"
	ErrCondResourceDeleted       Symbol = "amqp:resource-deleted"
	ErrCondIllegalState          Symbol = "amqp:illegal-state"
	ErrCondFrameSizeTooSmall     Symbol = "amqp:frame-size-too-small"

	ErrCondConnectionForced   Symbol = "amqp:connection:forced"
	ErrCondFramingError       Symbol = "amqp:connection:framing-error"
	ErrCondConnectionRedirect Symbol = "amqp:connection:redirect"

	ErrCondWindowViolation  Symbol = "amqp:session:window-violation"
	ErrCondErrantLink       Symbol = "amqp:session:errant-link"
	ErrCondHandleInUse      Symbol = "amqp:session:handle-in-use"
	ErrCondUnattachedHandle Symbol = "amqp:session:unattached-handle"

	ErrCondDetachForced          Symbol = "amqp:link:detach-forced"
	ErrCondTransferLimitExceeded Symbol = "amqp:link:transfer-limit-exceeded"
	ErrCondMessageSizeExceeded   Symbol = "amqp:link:message-size-exceeded"
	ErrCondLinkRedirect          Symbol = "amqp:link:redirect"
	ErrCondStolen                Symbol = "amqp:link:stolen"
)

// Error is an AMQP error (spec 2.8.14): what detach, end, close and the
// rejected outcome carry. A handler returns one to choose the condition the
// peer sees; any other Go error becomes amqp:internal-error.
type Error struct {
	Condition   Symbol
	Description string
	Info        Map
}

func (e *Error) Error() string {
	if e.Description == "" {
		return string(e.Condition)
	}
	return fmt.Sprintf("%s: %s", e.Condition, e.Description)
}

// Errorf builds an *Error with a formatted description.
func Errorf(cond Symbol, format string, args ...any) *Error {
	return &Error{Condition: cond, Description: fmt.Sprintf(format, args...)}
}

// asError turns any error into the *Error a peer will see.
func asError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, errDecode) {
		return &Error{Condition: ErrCondDecodeError, Description: err.Error()}
	}
	return &Error{Condition: ErrCondInternalError, Description: err.Error()}
}

func decodeError(d *decoder) (*Error, error) {
	if err := d.expectDescribed(descError, "error"); err != nil {
		return nil, err
	}
	e := new(Error)
	f := d.openFields()
	f.required(f.sym(&e.Condition), "condition")
	f.str(&e.Description)
	f.mapField(&e.Info)
	return e, f.done()
}

func (e *Error) append(b []byte) []byte {
	b, f := beginFields(b, descError)
	b = appendSymbol(b, e.Condition)
	f.field(b, false)
	b = appendOptString(b, f, e.Description)
	b = appendOptMap(b, f, e.Info)
	return f.end(b)
}

// DeliveryState is the state of a delivery: one of the outcomes Accepted,
// Rejected, Released and Modified, or the non-terminal Received.
type DeliveryState interface {
	appendState(b []byte) []byte
}

// Accepted: the message was processed.
type Accepted struct{}

// Rejected: the message is invalid; Error says why.
type Rejected struct{ Error *Error }

// Released: the message was not and will not be processed here.
type Released struct{}

// Modified: like released, with changes for the next delivery attempt.
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations Map
}

// Received: how much of a delivery arrived (for resuming links).
type Received struct {
	SectionNumber uint32
	SectionOffset uint64
}

func (Accepted) appendState(b []byte) []byte {
	return append(appendDescriptor(b, descAccepted), codeList0)
}

func (Released) appendState(b []byte) []byte {
	return append(appendDescriptor(b, descReleased), codeList0)
}

func (s Rejected) appendState(b []byte) []byte {
	b, f := beginFields(b, descRejected)
	b = appendOptError(b, f, s.Error)
	return f.end(b)
}

func (s Modified) appendState(b []byte) []byte {
	b, f := beginFields(b, descModified)
	b = appendOptBool(b, f, s.DeliveryFailed)
	b = appendOptBool(b, f, s.UndeliverableHere)
	b = appendOptMap(b, f, s.MessageAnnotations)
	return f.end(b)
}

func (s Received) appendState(b []byte) []byte {
	b, f := beginFields(b, descReceived)
	b = appendUint(b, s.SectionNumber)
	f.field(b, false)
	b = appendUlong(b, s.SectionOffset)
	f.field(b, false)
	return f.end(b)
}

func decodeState(d *decoder) (DeliveryState, error) {
	c, err := d.byte()
	if err != nil {
		return nil, err
	}
	if c != codeDescribed {
		return nil, decodeErrorf("expected a delivery state, got %s", typeName(c))
	}
	desc, err := d.descriptor()
	if err != nil {
		return nil, err
	}
	f := d.openFields()
	var s DeliveryState
	switch desc {
	case descAccepted:
		s = Accepted{}
	case descReleased:
		s = Released{}
	case descRejected:
		var r Rejected
		f.errorField(&r.Error)
		s = r
	case descModified:
		var m Modified
		f.boolean(&m.DeliveryFailed)
		f.boolean(&m.UndeliverableHere)
		f.mapField(&m.MessageAnnotations)
		s = m
	case descReceived:
		var r Received
		f.required(f.u32(&r.SectionNumber), "section-number")
		f.required(f.u64(&r.SectionOffset), "section-offset")
		s = r
	default:
		return nil, decodeErrorf("unknown delivery state 0x%x", desc)
	}
	return s, f.done()
}

// Engine-level sentinel errors returned by Link methods.
var (
	// ErrNoCredit: the peer has not granted credit for another delivery.
	ErrNoCredit = errors.New("amqp: no link credit")
	// ErrLinkClosed: the link was detached, or its session or connection ended.
	ErrLinkClosed = errors.New("amqp: link closed")
	// ErrUnknownDelivery: the delivery id is not unsettled on this link.
	ErrUnknownDelivery = errors.New("amqp: unknown delivery")
)
