package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// ---------------------------------------------------------------------------
// Protocol headers and SASL.

func TestEngineProtocolHeaderSASLAnonymous(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dial()
	c.write(protoHeaderSASL[:])
	c.expectHeader(protoHeaderSASL)
	m := c.expect(descSASLMechanisms)
	if m.typ != frameTypeSASL {
		t.Fatalf("sasl-mechanisms in a frame of type %d, want SASL", m.typ)
	}
	if !slices.Contains(m.mechs, "ANONYMOUS") {
		t.Fatalf("mechanisms %v lack ANONYMOUS", m.mechs)
	}
	c.write(engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("trace@example")}).append))
	o := c.expect(descSASLOutcome)
	if o.typ != frameTypeSASL || o.outcome.Code != saslOK {
		t.Fatalf("sasl-outcome code %d (frame type %d), want 0", o.outcome.Code, o.typ)
	}
	open := c.open(engClientOpen())
	if open.open.ContainerID != "quorumbus" || open.open.MaxFrameSize != 65536 || open.open.IdleTimeout != 60000 {
		t.Errorf("server open %+v, want the defaults", open.open)
	}
	if id := env.conn().Identity(); id != "anonymous" {
		t.Errorf("Identity() = %q, want anonymous", id)
	}
	c.sessionEchoAfterBegin(0)
}

// sessionEchoAfterBegin begins a session and proves it works.
func (c *engConn) sessionEchoAfterBegin(ch uint16) {
	c.t.Helper()
	c.begin(ch)
	c.sessionEcho(ch)
}

func TestEngineProtocolHeaderSASLPipelined(t *testing.T) {
	// A client may send the SASL header, its sasl-init, the AMQP header and
	// its open without waiting (spec 5.3.2 allows pipelining).
	env := startEngine(t, nil, nil)
	c := env.dial()
	var b []byte
	b = append(b, protoHeaderSASL[:]...)
	b = append(b, engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)...)
	b = append(b, protoHeaderAMQP[:]...)
	o := engClientOpen()
	b = append(b, engFrameBytes(frameTypeAMQP, 0, o.append)...)
	c.write(b)
	c.expectHeader(protoHeaderSASL)
	c.expect(descSASLMechanisms)
	if f := c.expect(descSASLOutcome); f.outcome.Code != saslOK {
		t.Fatalf("outcome %d", f.outcome.Code)
	}
	c.expectHeader(protoHeaderAMQP)
	c.expect(descOpen)
	c.sessionEchoAfterBegin(3)
}

func TestEngineProtocolHeaderPlainAMQP(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	if id := env.conn().Identity(); id != "anonymous" {
		t.Errorf("Identity() = %q, want anonymous", id)
	}
	c.sessionEchoAfterBegin(0)
}

func TestEngineProtocolHeaderRequireSASL(t *testing.T) {
	env := startEngine(t, &Server{RequireSASL: true}, nil)

	t.Run("plain AMQP header refused", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(protoHeaderAMQP[:])
		c.expectHeader(protoHeaderSASL)
		c.expectEOF()
		env.noOpenConn()
	})
	t.Run("SASL accepted", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(protoHeaderSASL[:])
		c.expectHeader(protoHeaderSASL)
		c.expect(descSASLMechanisms)
		c.write(engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append))
		if f := c.expect(descSASLOutcome); f.outcome.Code != saslOK {
			t.Fatalf("outcome %d", f.outcome.Code)
		}
		c.open(engClientOpen())
		env.conn()
	})
}

func TestEngineProtocolHeaderUnsupported(t *testing.T) {
	headers := []struct {
		name string
		hdr  string
	}{
		{"HTTP", "HTTP/1.1"},
		{"protocol id 9", "AMQP\x09\x01\x00\x00"},
		{"version 1.1", "AMQP\x00\x01\x01\x00"},
		{"revision 1.0.1", "AMQP\x00\x01\x00\x01"},
		{"AMQP 0-9-1", "AMQP\x00\x00\x09\x01"},
		{"AMQP 0-10", "AMQP\x01\x01\x00\x0a"},
		{"TLS", "AMQP\x02\x01\x00\x00"},
		{"zeros", "\x00\x00\x00\x00\x00\x00\x00\x00"},
	}
	for _, requireSASL := range []bool{false, true} {
		env := startEngine(t, &Server{RequireSASL: requireSASL}, nil)
		want := protoHeaderAMQP
		if requireSASL {
			want = protoHeaderSASL
		}
		for _, h := range headers {
			t.Run(fmt.Sprintf("%s/requireSASL=%v", h.name, requireSASL), func(t *testing.T) {
				env := env.with(t)
				c := env.dial()
				c.write([]byte(h.hdr))
				c.expectHeader(want)
				c.expectEOF()
				env.noOpenConn()
			})
		}
	}
}

func TestEngineProtocolHeaderAfterSASL(t *testing.T) {
	// After a successful SASL exchange the next header must be AMQP; a
	// second SASL header is answered with the AMQP header and the end.
	env := startEngine(t, nil, nil)
	c := env.dial()
	var b []byte
	b = append(b, protoHeaderSASL[:]...)
	b = append(b, engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)...)
	b = append(b, protoHeaderSASL[:]...)
	c.write(b)
	c.expectHeader(protoHeaderSASL)
	c.expect(descSASLMechanisms)
	c.expect(descSASLOutcome)
	c.expectHeader(protoHeaderAMQP)
	c.expectEOF()
	env.noOpenConn()
}

func TestEngineSASLPlain(t *testing.T) {
	authz := make(chan string, 16)
	srv := &Server{SASL: SASL{Plain: func(authzid, user, pass string) error {
		authz <- authzid
		if user == "alice" && pass == "s3cret" {
			return nil
		}
		return ErrAuthFailed
	}}}
	env := startEngine(t, srv, nil)

	cases := []struct {
		name     string
		mech     Symbol
		resp     string
		nilResp  bool
		ok       bool
		wantCode uint8 // when !ok; 0 means any non-zero code
		authzid  string
	}{
		{name: "right credentials", mech: "PLAIN", resp: "\x00alice\x00s3cret", ok: true},
		{name: "with authzid", mech: "PLAIN", resp: "admin\x00alice\x00s3cret", ok: true, authzid: "admin"},
		{name: "wrong password", mech: "PLAIN", resp: "\x00alice\x00wrong", wantCode: saslAuth},
		{name: "unknown user", mech: "PLAIN", resp: "\x00bob\x00s3cret", wantCode: saslAuth},
		{name: "empty user", mech: "PLAIN", resp: "\x00\x00s3cret", wantCode: saslAuth},
		{name: "no separators", mech: "PLAIN", resp: "alice", wantCode: saslAuth},
		{name: "no initial response", mech: "PLAIN", nilResp: true, wantCode: saslAuth},
		{name: "unknown mechanism", mech: "SCRAM-SHA-256", resp: "n,,n=alice,r=abc"},
		{name: "ANONYMOUS not offered", mech: "ANONYMOUS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			for len(authz) > 0 {
				<-authz
			}
			c := env.dial()
			c.write(protoHeaderSASL[:])
			c.expectHeader(protoHeaderSASL)
			m := c.expect(descSASLMechanisms)
			if !slices.Equal(m.mechs, []Symbol{"PLAIN"}) {
				t.Fatalf("mechanisms %v, want [PLAIN]", m.mechs)
			}
			init := saslInit{Mechanism: tc.mech}
			if !tc.nilResp {
				init.InitialResponse = []byte(tc.resp)
			}
			c.write(engFrameBytes(frameTypeSASL, 0, init.append))
			o := c.expect(descSASLOutcome)
			if tc.ok {
				if o.outcome.Code != saslOK {
					t.Fatalf("outcome code %d, want 0", o.outcome.Code)
				}
				c.open(engClientOpen())
				if id := env.conn().Identity(); id != "alice" {
					t.Errorf("Identity() = %q, want alice", id)
				}
				if got := <-authz; got != tc.authzid {
					t.Errorf("authzid %q, want %q", got, tc.authzid)
				}
				c.sessionEchoAfterBegin(0)
				return
			}
			switch {
			case o.outcome.Code == saslOK:
				t.Fatalf("outcome code 0 for bad credentials")
			case tc.wantCode != 0 && o.outcome.Code != tc.wantCode:
				t.Fatalf("outcome code %d, want %d", o.outcome.Code, tc.wantCode)
			}
			c.expectEOF()
			env.noOpenConn()
		})
	}
}

func TestEngineSASLBadInit(t *testing.T) {
	env := startEngine(t, nil, nil)
	cases := []struct {
		name  string
		frame []byte
	}{
		{"AMQP frame instead of sasl-init", engFrameBytes(frameTypeAMQP, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)},
		{"sasl-init without mechanism", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte {
			return append(appendDescriptor(b, descSASLInit), codeList0)
		})},
		{"garbage body", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { return append(b, 0xde, 0xad, 0xbe, 0xef) })},
		{"open instead of sasl-init", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { o := engClientOpen(); return o.append(b) })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			c.write(append(protoHeaderSASL[:], tc.frame...))
			c.expectHeader(protoHeaderSASL)
			c.expect(descSASLMechanisms)
			o := c.expect(descSASLOutcome)
			if o.outcome.Code == saslOK {
				t.Fatalf("outcome code 0 for a bad sasl-init")
			}
			c.expectEOF()
			env.noOpenConn()
		})
	}
}

// ---------------------------------------------------------------------------
// The open exchange.

func TestEngineFirstFrameNotOpen(t *testing.T) {
	env := startEngine(t, nil, nil)
	cases := []struct {
		name  string
		frame []byte
		want  Symbol
	}{
		{"begin", engFrameBytes(frameTypeAMQP, 0, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append), ErrCondFramingError},
		{"close", engFrameBytes(frameTypeAMQP, 0, engCloseBody), ErrCondFramingError},
		{"open in a SASL frame", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { o := engClientOpen(); return o.append(b) }), ErrCondFramingError},
		{"body not described", engFrameBytes(frameTypeAMQP, 0, func(b []byte) []byte { return append(b, codeList0) }), ErrCondDecodeError},
		{"open without container-id", engFrameBytes(frameTypeAMQP, 0, func(b []byte) []byte {
			return append(appendDescriptor(b, descOpen), codeList0)
		}), ErrCondDecodeError},
		{"empty frame", []byte{0, 0, 0, 8, 2, 0, 0, 0}, "*"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			c.write(append(protoHeaderAMQP[:], tc.frame...))
			c.expectHeader(protoHeaderAMQP)
			c.expect(descOpen) // spec 2.4.1: open before the close that refuses
			c.expectClose(tc.want)
			env.noOpenConn()
		})
	}
	t.Run("malformed frame header", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(append(protoHeaderAMQP[:], 0, 0, 0, 4, 2, 0, 0, 0))
		c.expectHeader(protoHeaderAMQP)
		c.expect(descOpen)
		c.expectClose(ErrCondFramingError)
	})
}

func TestEngineOpenMaxFrameSize(t *testing.T) {
	env := startEngine(t, nil, nil)
	for _, size := range []uint32{0, 1, 511} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			o := engClientOpen()
			o.MaxFrameSize = size
			c.open(o)
			c.expectClose(ErrCondInvalidField)
			env.noOpenConn()
		})
	}
	t.Run("512 accepted", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		o := engClientOpen()
		o.MaxFrameSize = minMaxFrameSize
		c.open(o)
		env.conn()
		c.sessionEchoAfterBegin(0)
	})
}

func TestEngineOpenConnRefused(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want Symbol
	}{
		{"amqp error", Errorf(ErrCondUnauthorizedAccess, "no entry for %s", "raw-client"), ErrCondUnauthorizedAccess},
		{"go error", errors.New("backend down"), ErrCondInternalError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newEngHandler()
			h.openErr = tc.err
			env := startEngine(t, nil, h)
			c := env.dial()
			c.open(engClientOpen())
			e := c.expectClose(tc.want)
			if tc.want == ErrCondUnauthorizedAccess && e.Description != "no entry for raw-client" {
				t.Errorf("description %q", e.Description)
			}
		})
	}
}

func TestEngineSecondOpen(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	o := engClientOpen()
	c.send(0, o.append)
	c.expectClose(ErrCondIllegalState)
	if err := env.closedWith(); err == nil {
		t.Error("Closed(nil) after a protocol error")
	}
}

// ---------------------------------------------------------------------------
// Malformed frames after the open exchange.

func TestEngineFramingErrors(t *testing.T) {
	env := startEngine(t, &Server{MaxFrameSize: 1024}, nil)
	cases := []struct {
		name  string
		frame []byte
	}{
		{"size 0", []byte{0, 0, 0, 0, 2, 0, 0, 0}},
		{"size 7", []byte{0, 0, 0, 7, 2, 0, 0, 0}},
		{"size above max-frame-size", []byte{0, 0, 4, 1, 2, 0, 0, 0}},
		{"size 4 GiB", []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}},
		{"doff 0", []byte{0, 0, 0, 8, 0, 0, 0, 0}},
		{"doff 1", []byte{0, 0, 0, 8, 1, 0, 0, 0}},
		{"doff beyond the frame", []byte{0, 0, 0, 8, 3, 0, 0, 0}},
		{"unknown frame type", []byte{0, 0, 0, 8, 2, 7, 0, 0}},
		{"SASL frame after open", engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			c.write(tc.frame)
			c.expectClose(ErrCondFramingError)
			if err := env.closedWith(); err == nil {
				t.Error("ConnHandler.Closed(nil) after a framing error")
			}
		})
	}
	t.Run("extended header is skipped", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		// doff 3: four bytes of extended header before the begin body.
		b := []byte{0, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd}
		b = (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append(b)
		b = finishFrame(b, 0)
		c.write(b)
		f := c.expect(descBegin)
		if !f.begin.HasRemoteChannel || f.begin.RemoteChannel != 0 {
			t.Fatalf("begin reply %+v", f.begin)
		}
	})
}

// engNestedLists returns n lists nested in one another, list32 encoded.
func engNestedLists(n int) []byte {
	inner := []byte{codeList0}
	for range n {
		b := []byte{codeList32, 0, 0, 0, 0, 0, 0, 0, 1}
		engPutU32(b[1:], uint32(len(inner)+4))
		inner = append(b, inner...)
	}
	return inner
}

func engPutU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// engAttachWithProperties encodes an attach whose properties field (the
// 14th) holds raw bytes.
func engAttachWithProperties(raw []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		b, f := beginFields(b, descAttach)
		b = appendString(b, "bad")
		f.field(b, false)
		b = appendUint(b, 0)
		f.field(b, false)
		b = appendBool(b, false)
		f.field(b, false)
		for range 10 {
			b = appendNull(b)
			f.field(b, false)
		}
		b = append(b, raw...)
		f.field(b, false)
		return f.end(b)
	}
}

func TestEngineDecodeErrors(t *testing.T) {
	env := startEngine(t, nil, nil)
	raw := func(body ...byte) func([]byte) []byte {
		return func(b []byte) []byte { return append(b, body...) }
	}
	cases := []struct {
		name string
		ch   uint16
		body func([]byte) []byte
		why  string // in the close description: the intended check fired
	}{
		{"not described", 0, raw(codeList0), "described"},
		{"descriptor null", 0, raw(codeDescribed, codeNull, codeList0), "null"},
		{"descriptor is a string", 0, raw(codeDescribed, codeStr8, 1, 'x', codeList0), "string"},
		{"unknown performative", 0, raw(codeDescribed, codeSmallUlong, 0x99, codeList0), "0x99"},
		{"unknown symbolic descriptor", 0, func(b []byte) []byte {
			return append(appendSymbol(append(b, codeDescribed), "amqp:bogus:list"), codeList0)
		}, "amqp:bogus:list"},
		{"truncated descriptor", 0, raw(codeDescribed, codeUlong, 0, 0), "need 8 bytes"},
		{"truncated list", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList8, 50, 4, codeNull), "size 50"},
		{"list count beyond its bytes", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList32, 0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xff, codeNull, codeNull, codeNull, codeNull), "count 2147483647"},
		{"list size beyond the frame", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList32, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 3), "size 4294967280"},
		{"begin without mandatory fields", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList0), "next-outgoing-id"},
		{"begin with a string window", 0, func(b []byte) []byte {
			b, f := beginFields(b, descBegin)
			b = appendNull(b)
			f.field(b, false)
			b = appendUint(b, 0)
			f.field(b, false)
			b = appendString(b, "many")
			f.field(b, false)
			b = appendUint(b, 10)
			f.field(b, false)
			return f.end(b)
		}, "string"},
		{"attach with snd-settle-mode 3", 1, func(b []byte) []byte {
			a := engSenderAttach(0, "x")
			a.SndSettleMode = ptr[uint8](3)
			return a.append(b)
		}, "snd-settle-mode"},
		{"attach with rcv-settle-mode 2", 1, func(b []byte) []byte {
			a := engSenderAttach(0, "x")
			a.RcvSettleMode = ptr[uint8](2)
			return a.append(b)
		}, "rcv-settle-mode"},
		{"attach with a huge map count", 1, engAttachWithProperties([]byte{codeMap32, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, codeNull, codeNull, codeNull, codeNull}), "count 4294967294"},
		{"attach with a huge array count", 1, engAttachWithProperties([]byte{codeArray32, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff, codeNull, 0, 0, 0, 0}), "count 4294967295"},
		{"attach nested 100 deep", 1, engAttachWithProperties(engNestedLists(100)), "nested"},
		{"attach with a target where the source belongs", 1, func(b []byte) []byte {
			b, f := beginFields(b, descAttach)
			b = appendString(b, "x")
			f.field(b, false)
			b = appendUint(b, 0)
			f.field(b, false)
			b = appendBool(b, false)
			f.field(b, false)
			b = appendNull(b)
			f.field(b, false)
			b = appendNull(b)
			f.field(b, false)
			b = (&Target{Address: "q"}).append(b)
			f.field(b, false)
			return f.end(b)
		}, "source"},
		{"transfer with a 33-byte tag", 1, func(b []byte) []byte {
			t := engMsgTransfer(0, 0)
			t.DeliveryTag = bytes.Repeat([]byte{'x'}, 33)
			return t.append(b)
		}, "delivery-tag"},
		{"flow with an invalid boolean", 1, func(b []byte) []byte {
			b, f := beginFields(b, descFlow)
			for _, v := range []uint32{0, 10, 0, 10} {
				b = appendUint(b, v)
				f.field(b, false)
			}
			for range 4 {
				b = appendNull(b)
				f.field(b, false)
			}
			b = append(b, codeBool, 7) // drain
			f.field(b, false)
			return f.end(b)
		}, "boolean"},
		{"end with an error without condition", 1, func(b []byte) []byte {
			b, f := beginFields(b, descEnd)
			b = append(appendDescriptor(b, descError), codeList0)
			f.field(b, false)
			return f.end(b)
		}, "condition"},
		{"end with an invalid UTF-8 description", 1, func(b []byte) []byte {
			b, f := beginFields(b, descEnd)
			b2, ef := beginFields(b, descError)
			b2 = appendSymbol(b2, "amqp:internal-error")
			ef.field(b2, false)
			b2 = append(b2, codeStr8, 2, 0xff, 0xfe)
			ef.field(b2, false)
			b = ef.end(b2)
			f.field(b, false)
			return f.end(b)
		}, "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			if tc.ch != 0 {
				c.begin(tc.ch)
			}
			c.send(tc.ch, tc.body)
			e := c.expectClose(ErrCondDecodeError)
			if !strings.Contains(e.Description, tc.why) {
				t.Errorf("close %v: the description does not mention %q, so another check fired", e, tc.why)
			}
			if err := env.closedWith(); err == nil {
				t.Error("ConnHandler.Closed(nil) after a decode error")
			}
		})
	}
}
