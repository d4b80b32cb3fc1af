package amqp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Frame layout (spec 2.3.1): SIZE (4 bytes, whole frame), DOFF (data offset
// in 4-byte words, at least 2), TYPE (0 AMQP, 1 SASL), CHANNEL (2 bytes),
// extended header, body.
const (
	frameHeaderSize = 8
	frameTypeAMQP   = 0
	frameTypeSASL   = 1

	// minMaxFrameSize is the smallest max-frame-size a peer may announce
	// (spec 2.7.1, MIN-MAX-FRAME-SIZE).
	minMaxFrameSize = 512
)

// Protocol headers: "AMQP" followed by protocol id, major, minor, revision.
var (
	protoHeaderAMQP = [8]byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0}
	protoHeaderSASL = [8]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}
)

// frame is one decoded frame header plus its body. body aliases the reader's
// buffer and is valid until the next read.
type frame struct {
	typ     byte
	channel uint16
	body    []byte // empty for a keep-alive frame
}

// frameReader reads frames straight out of a bufio.Reader large enough to
// hold the biggest frame allowed, so that frame bodies are never copied.
type frameReader struct {
	r       *bufio.Reader
	maxSize uint32
	pending int // bytes of the previous frame still to discard
}

func newFrameReader(r io.Reader, maxFrameSize uint32) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, int(maxFrameSize)), maxSize: maxFrameSize}
}

// errFraming is returned for malformed frame headers; the connection
// answers it with amqp:connection:framing-error.
func framingErrorf(format string, args ...any) *Error {
	return &Error{Condition: ErrCondFramingError, Description: fmt.Sprintf(format, args...)}
}

// protoHeader reads an 8-byte protocol header.
func (fr *frameReader) protoHeader() (h [8]byte, err error) {
	if fr.pending > 0 {
		if _, err := fr.r.Discard(fr.pending); err != nil {
			return h, err
		}
		fr.pending = 0
	}
	_, err = io.ReadFull(fr.r, h[:])
	return h, err
}

// next reads the next frame. The returned body stays valid until the next
// call.
func (fr *frameReader) next() (frame, error) {
	if fr.pending > 0 {
		if _, err := fr.r.Discard(fr.pending); err != nil {
			return frame{}, err
		}
		fr.pending = 0
	}
	h, err := fr.r.Peek(frameHeaderSize)
	if err != nil {
		if err == io.EOF && len(h) > 0 {
			err = io.ErrUnexpectedEOF // the stream ended inside a header
		}
		return frame{}, err
	}
	size := binary.BigEndian.Uint32(h[0:4])
	doff := int(h[4]) * 4
	f := frame{typ: h[5], channel: binary.BigEndian.Uint16(h[6:8])}
	switch {
	case size < frameHeaderSize:
		return frame{}, framingErrorf("frame size %d is smaller than its header", size)
	case size > fr.maxSize:
		return frame{}, framingErrorf("frame size %d exceeds the max-frame-size %d", size, fr.maxSize)
	case doff < frameHeaderSize || uint32(doff) > size:
		return frame{}, framingErrorf("data offset %d is invalid for a frame of %d bytes", doff, size)
	case f.typ != frameTypeAMQP && f.typ != frameTypeSASL:
		return frame{}, framingErrorf("unknown frame type %d", f.typ)
	}
	whole, err := fr.r.Peek(int(size))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	f.body = whole[doff:]
	fr.pending = int(size)
	return f, nil
}

// appendFrame appends a frame header for a body that the caller appends
// next; finishFrame patches the size once the body is complete.
func appendFrameHeader(b []byte, typ byte, channel uint16) ([]byte, int) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 2, typ, byte(channel>>8), byte(channel))
	return b, start
}

func finishFrame(b []byte, start int) []byte {
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// keepAlive is an empty AMQP frame on channel 0 (spec 2.4.5).
var keepAlive = []byte{0, 0, 0, 8, 2, 0, 0, 0}

// performative codes found by peeking at a frame body's descriptor.
func framePerformative(body []byte) (code uint64, d decoder, err error) {
	d = decoder{b: body}
	code, err = d.performative()
	return code, d, err
}

// performative reads the descriptor of the performative that starts a
// frame body.
func (d *decoder) performative() (uint64, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	if c != codeDescribed {
		return 0, decodeErrorf("frame body is not a described performative (0x%02x)", c)
	}
	return d.descriptor()
}

// SASL performatives (spec 5.3.3).

type saslMechanisms struct{ Mechanisms []Symbol }

func (p *saslMechanisms) append(b []byte) []byte {
	b, f := beginFields(b, descSASLMechanisms)
	// sasl-server-mechanisms is mandatory and multiple: always an array,
	// which every client accepts.
	b = appendValueMust(b, p.Mechanisms)
	f.field(b, false)
	return f.end(b)
}

func (p *saslMechanisms) decode(d *decoder) error {
	f := d.openFields()
	f.symbols(&p.Mechanisms)
	return f.done()
}

type saslInit struct {
	Mechanism       Symbol
	InitialResponse []byte
	Hostname        string
}

func (p *saslInit) decode(d *decoder) error {
	f := d.openFields()
	f.required(f.sym(&p.Mechanism), "mechanism")
	f.binary(&p.InitialResponse)
	f.str(&p.Hostname)
	return f.done()
}

func (p *saslInit) append(b []byte) []byte {
	b, f := beginFields(b, descSASLInit)
	b = appendSymbol(b, p.Mechanism)
	f.field(b, false)
	if p.InitialResponse != nil {
		b = appendBinary(b, p.InitialResponse)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.InitialResponse == nil)
	b = appendOptString(b, f, p.Hostname)
	return f.end(b)
}

// SASL outcome codes (spec 5.3.3.6).
const (
	saslOK      uint8 = 0
	saslAuth    uint8 = 1
	saslSys     uint8 = 2
	saslSysPerm uint8 = 3
	saslSysTemp uint8 = 4
)

type saslOutcome struct {
	Code           uint8
	AdditionalData []byte
}

func (p *saslOutcome) append(b []byte) []byte {
	b, f := beginFields(b, descSASLOutcome)
	b = appendUbyte(b, p.Code)
	f.field(b, false)
	if p.AdditionalData != nil {
		b = appendBinary(b, p.AdditionalData)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.AdditionalData == nil)
	return f.end(b)
}

func (p *saslOutcome) decode(d *decoder) error {
	f := d.openFields()
	f.required(f.u8(&p.Code), "code")
	f.binary(&p.AdditionalData)
	return f.done()
}
