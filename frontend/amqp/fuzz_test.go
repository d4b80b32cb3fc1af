package amqp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// goAmqpStream is what github.com/Azure/go-amqp v1.7.0 sent to this
// server, captured on the wire (one protocol header or frame a line):
// SASL ANONYMOUS, open, begin, attach of a sender to "q" (snd-settle-mode
// mixed, rcv first), transfer of a message with message annotations,
// properties and data "hello", attach of a receiver on "q" (rcv-settle-mode
// second), flow credit 1, disposition accepted (unsettled), flow, detach
// of both links, end and close.
var goAmqpStream = []string{
	"414d515003010000",
	"0000002a02010000005341d00000001a00000002a309414e4f4e594d4f5553a009616e6f6e796d6f7573",
	"414d515000010000",
	"0000007202000000005310d0000000620000000aa10e636170747572652d636c69656e74a1096c6f63616c686f73747000010000407000003a9840404040d10000002f00000004a30770726f64756374a10e4d53476f6c616e67436c69656e74a30776657273696f6ea10776312e31312e30",
	"0000002502000000005311d0000000150000000540437000001388700000138870fffffffe",
	"0000006802000000005312d0000000580000000aa13643464549654f3155696c347748565a4f3756376c4a5178505575727636625a332d4c674775397753303658416a646a7066686a756a7743425002500000532845005329d00000000700000001a10171404043",
	"0000005f02000000005314d000000011000000044343a008000000000000000043005372d10000001c00000002a313782d6f70742d706172746974696f6e2d6b6579a1016b005373d00000000800000001a1026d31005375a00568656c6c6f",
	"0000006502000000005312d00000005500000007a13652715832374f5a2d55326d59796f5a6676646c4a5042714c2d5072307872423067764f6641505066524d336447324147624739703151520141405001005328d00000000700000001a1017100532945",
	"0000002602000000005313d00000001600000007437000001388520170000013885201435201",
	"0000001c02000000005315d00000000c000000054143404000532445",
	"0000002802000000005313d000000018000000075201700000138852017000001388520152015201",
	"0000001702000000005316d00000000700000002520141",
	"0000001602000000005316d000000006000000024341",
	"0000000c0200000000531745",
	"0000000c0200000000531845",
}

func joinChunks(chunks [][]byte) []byte { return bytes.Join(chunks, nil) }

func goAmqpChunks() [][]byte {
	out := make([][]byte, len(goAmqpStream))
	for i, h := range goAmqpStream {
		out[i] = unhex(h)
	}
	return out
}

// splitStream cuts a client byte stream into protocol headers and frames.
func splitStream(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := 8
		if !bytes.HasPrefix(b, []byte("AMQP")) && len(b) >= 4 {
			n = int(binary.BigEndian.Uint32(b))
		}
		n = max(min(n, len(b)), 1)
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

type appender interface{ append([]byte) []byte }

func rawFrame(typ byte, channel uint16, body []byte) []byte {
	b, start := appendFrameHeader(nil, typ, channel)
	return finishFrame(append(b, body...), start)
}

func amqpFrame(channel uint16, p appender, payload ...byte) []byte {
	b, start := appendFrameHeader(nil, frameTypeAMQP, channel)
	return finishFrame(append(p.append(b), payload...), start)
}

func saslFrame(p appender) []byte {
	b, start := appendFrameHeader(nil, frameTypeSASL, 0)
	return finishFrame(p.append(b), start)
}

// testMessage is an encoded message: header, properties, data.
func testMessage(body string) []byte {
	b, f := beginFields(nil, SectionHeader)
	b = appendBool(b, true)
	f.field(b, false)
	b = f.end(b)
	b, f = beginFields(b, SectionProperties)
	b = appendString(b, "msg-1")
	f.field(b, false)
	b = f.end(b)
	return appendBinary(appendDescriptor(b, SectionData), []byte(body))
}

// Conversation pieces built with our own encoder.
var (
	convSASLInit  = saslFrame(&saslInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("anonymous"), Hostname: "localhost"})
	convOpen      = amqpFrame(0, &Open{ContainerID: "fuzz-client", Hostname: "localhost", MaxFrameSize: 65536, ChannelMax: 7, IdleTimeout: 30000})
	convBegin     = amqpFrame(0, &Begin{NextOutgoingID: 0, IncomingWindow: 100, OutgoingWindow: 100, HandleMax: 15})
	convAttachOut = amqpFrame(0, &Attach{Name: "snd", Handle: 0, Role: RoleSender, SndSettleMode: ptr(SenderSettleMixed),
		RcvSettleMode: ptr(ReceiverSettleFirst), Source: &Source{Address: "me"}, Target: &Target{Address: "q"}})
	convAttachIn = amqpFrame(0, &Attach{Name: "rcv", Handle: 1, Role: RoleReceiver, RcvSettleMode: ptr(ReceiverSettleSecond),
		Source: &Source{Address: "q", Filter: Map{{Symbol("apache.org:selector-filter:string"), Described{uint64(0x0000468c00000004), "a = 1"}}}},
		Target: &Target{}})
)

// ourConversation is a complete valid conversation: SASL, open, a session
// with a link on which we send (two messages, one in two frames) and a link
// on which we receive (credit, disposition), then detach, end and close.
func ourConversation() [][]byte {
	msg := testMessage("hello")
	return [][]byte{
		protoHeaderSASL[:], convSASLInit, protoHeaderAMQP[:], convOpen, convBegin,
		convAttachOut,
		amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true, DeliveryTag: []byte{0}, MessageFormat: 0, HasMessageFormat: true}, msg...),
		amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 1, HasDeliveryID: true, DeliveryTag: []byte{1}, More: true}, msg[:5]...),
		amqpFrame(0, &Transfer{Handle: 0}, msg[5:]...),
		amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 2, HasDeliveryID: true, DeliveryTag: []byte{2}, Settled: true}, msg...),
		convAttachIn,
		amqpFrame(0, &Flow{NextIncomingID: 0, HasNextIncomingID: true, IncomingWindow: 100, NextOutgoingID: 3, OutgoingWindow: 100,
			Handle: 1, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 2, HasLinkCredit: true, Echo: true}),
		amqpFrame(0, &Disposition{Role: RoleReceiver, First: 0, Last: 1, HasLast: true, State: Accepted{}}),
		amqpFrame(0, &Flow{IncomingWindow: 100, NextOutgoingID: 3, OutgoingWindow: 100, Handle: 1, HasHandle: true,
			DeliveryCount: 2, HasDeliveryCount: true, LinkCredit: 5, HasLinkCredit: true, Drain: true}),
		amqpFrame(0, &Detach{Handle: 0, Closed: true}),
		amqpFrame(0, &Detach{Handle: 1, Closed: true}),
		amqpFrame(0, &testEnd{}),
		amqpFrame(0, &testClose{}),
	}
}

// Connection fuzzing: a server with small limits and handlers that accept
// everything, fed a valid prefix and then arbitrary bytes.

type fuzzConnHandler struct{}

func (fuzzConnHandler) Attach(l *Link) (LinkHandler, error) {
	if l.Attach().Target != nil && l.Attach().Target.Address == "refuse" {
		return nil, Errorf(ErrCondNotFound, "no such node")
	}
	if l.PeerRole() == RoleSender {
		return fuzzReceiver{}, nil
	}
	return &fuzzSender{}, nil
}

func (fuzzConnHandler) Closed(error) {}

// fuzzReceiver settles every message the peer sends with accepted.
type fuzzReceiver struct{}

func (fuzzReceiver) Detached(*Link, error) {}

func (fuzzReceiver) Message(l *Link, d *Delivery) {
	if !d.Settled {
		_ = l.Settle(d.ID, Accepted{})
	}
}

// fuzzSender sends one message per credit, three at most, and answers
// drain and dispositions.
type fuzzSender struct {
	mu   sync.Mutex
	sent int
}

func (s *fuzzSender) Detached(*Link, error) {}

func (s *fuzzSender) Flow(l *Link, credit uint32, drain bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; credit > 0 && s.sent < 3; credit-- {
		s.sent++
		if _, err := l.Send([]byte{byte(s.sent)}, testMessage("x"), s.sent == 2); err != nil {
			break
		}
	}
	if drain {
		l.Drain()
	}
}

func (s *fuzzSender) Disposition(l *Link, id uint32, _ DeliveryState, settled bool) {
	if !settled {
		_ = l.Settle(id, Accepted{})
	}
}

func newFuzzServer() *Server {
	return &Server{
		Handler:        HandlerFunc(func(*Conn) (ConnHandler, error) { return fuzzConnHandler{}, nil }),
		MaxFrameSize:   4096,
		ChannelMax:     7,
		IdleTimeout:    2 * time.Second,
		WriteTimeout:   2 * time.Second,
		MaxMessageSize: 8192,
		SessionWindow:  4,
		LinkCredit:     4,
		SASL: SASL{Anonymous: true, Extra: []Symbol{"MSSBCBS"}, Plain: func(_, user, pass string) error {
			if user == "user" && pass == "pass" {
				return nil
			}
			return ErrAuthFailed
		}},
		Logger: slog.New(slog.DiscardHandler),
	}
}

// watchConn is the server's end of the pipe. It notices when the server
// asks for more input after consuming all the client wrote (so it has
// processed every frame) and when the server closes the connection.
type watchConn struct {
	net.Conn
	want      int64
	got       atomic.Int64
	drained   chan struct{}
	drainOnce sync.Once
	closed    chan struct{}
	closeOnce sync.Once
}

func (w *watchConn) Read(p []byte) (int, error) {
	if w.got.Load() >= w.want {
		w.drainOnce.Do(func() { close(w.drained) })
	}
	n, err := w.Conn.Read(p)
	w.got.Add(int64(n))
	return n, err
}

func (w *watchConn) Close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	return w.Conn.Close()
}

// capWriter keeps the first limit bytes written to it.
type capWriter struct {
	buf   bytes.Buffer
	limit int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.limit - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

const connTimeout = 5 * time.Second

// runConnection serves one connection that receives input and returns
// what the server wrote. It fails t if the server panics (the binary
// crashes), stops reading without closing, or does not finish in time.
func runConnection(t testing.TB, input []byte) []byte {
	srv := newFuzzServer()
	client, server := net.Pipe()
	wc := &watchConn{Conn: server, want: int64(len(input)), drained: make(chan struct{}), closed: make(chan struct{})}
	srv.ServeConn(wc)

	out := &capWriter{limit: 1 << 20}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, client)
	}()
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		_, _ = client.Write(input)
	}()

	timer := time.NewTimer(connTimeout)
	defer timer.Stop()
	select {
	case <-wc.drained:
	case <-wc.closed:
	case <-timer.C:
		client.Close()
		t.Fatalf("the server neither consumed its %d bytes of input nor closed the connection within %v", len(input), connTimeout)
	}
	client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), connTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("the connection did not finish within %v of the client closing: %v", connTimeout, err)
	}
	<-writeDone
	<-readDone
	return out.buf.Bytes()
}

// Prefixes that put the connection into a given state before the fuzzed
// bytes arrive.
var connPrefixes = [][][]byte{
	nil,
	{protoHeaderSASL[:]},
	{protoHeaderAMQP[:]},
	{protoHeaderSASL[:], convSASLInit, protoHeaderAMQP[:], convOpen},
	{protoHeaderAMQP[:], convOpen, convBegin},
	{protoHeaderAMQP[:], convOpen, convBegin, convAttachOut, convAttachIn},
}

func connInput(mode uint8, data []byte) []byte {
	return append(joinChunks(connPrefixes[int(mode)%len(connPrefixes)]), data...)
}

func connSeeds() []struct {
	mode uint8
	data []byte
} {
	goamqp := goAmqpChunks()
	ours := ourConversation()
	msg := testMessage("hello")
	body := func(chunks ...[]byte) []byte { return joinChunks(chunks) }
	closeF := amqpFrame(0, &testClose{})
	end := amqpFrame(0, &testEnd{})
	return []struct {
		mode uint8
		data []byte
	}{
		{0, joinChunks(goamqp)},
		{1, joinChunks(goamqp[1:])},
		{3, joinChunks(goamqp[4:])},
		{0, joinChunks(ours)},
		{2, joinChunks(ours[3:])},
		{4, joinChunks(ours[5:])},
		{5, joinChunks(ours[6:])},
		{0, joinChunks(goamqp[:4])}, // stops after open
		// SASL variants.
		{1, saslFrame(&saslInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00pass")})},
		{1, saslFrame(&saslInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00wrong")})},
		{1, saslFrame(&saslInit{Mechanism: "MSSBCBS"})},
		{1, body(convSASLInit, []byte("AMQP\x03\x01\x00\x00"))},
		{1, convOpen},
		// Bad protocol headers.
		{0, []byte("AMQP\x01\x01\x00\x00")},
		{0, []byte("GET / HTTP/1.1\r\n\r\n")},
		{2, []byte("AMQP\x00\x01\x00\x00")},
		// Open problems.
		{2, amqpFrame(0, &Open{ContainerID: "c", MaxFrameSize: 100, ChannelMax: 1})},
		{2, amqpFrame(0, &Begin{IncomingWindow: 1, OutgoingWindow: 1, HandleMax: math.MaxUint32})},
		{2, rawFrame(frameTypeSASL, 0, convOpen[8:])},
		{2, body(amqpFrame(0, &Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16, IdleTimeout: 1}), keepAlive, keepAlive, closeF)},
		// Session problems.
		{4, body(convOpen)},
		{4, body(convBegin)},
		{4, body(amqpFrame(3, &Begin{IncomingWindow: 1, OutgoingWindow: 1, HandleMax: 1}), amqpFrame(3, &testEnd{Error: &Error{Condition: "x:y", Description: "d"}}), end, closeF)},
		{4, body(amqpFrame(9, &Begin{IncomingWindow: 1, OutgoingWindow: 1, HandleMax: 1}))},
		{4, body(amqpFrame(1, &Begin{RemoteChannel: 1, HasRemoteChannel: true, IncomingWindow: 1, OutgoingWindow: 1}))},
		{4, body(amqpFrame(1, &Flow{IncomingWindow: 1, OutgoingWindow: 1}))},
		{4, body(amqpFrame(0, &Flow{IncomingWindow: 10, OutgoingWindow: 1, Echo: true}), closeF)},
		{4, body(amqpFrame(0, &Attach{Name: "x", Handle: 4096, Role: RoleSender, Target: &Target{Address: "q"}}))},
		{4, body(amqpFrame(0, &Attach{Name: "x", Handle: 0, Role: RoleSender, Target: &Target{Address: "refuse"}}), closeF)},
		{4, body(convAttachOut, convAttachOut)},
		// Link problems and edge cases.
		{5, body(amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true, DeliveryTag: []byte{1}, More: true}, msg[:3]...),
			amqpFrame(0, &Transfer{Handle: 0, Aborted: true}), closeF)},
		{5, body(amqpFrame(0, &Transfer{Handle: 0}, msg...))},
		{5, body(amqpFrame(0, &Transfer{Handle: 7, DeliveryID: 0, HasDeliveryID: true}, msg...))},
		{5, body(amqpFrame(0, &Transfer{Handle: 1, DeliveryID: 0, HasDeliveryID: true}, msg...))},
		{5, body(amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true}, make([]byte, 4000)...),
			amqpFrame(0, &Transfer{Handle: 0, More: true}, make([]byte, 4000)...),
			amqpFrame(0, &Transfer{Handle: 0}, make([]byte, 4000)...))},
		{5, body(amqpFrame(0, &Flow{IncomingWindow: 0, NextOutgoingID: 0, OutgoingWindow: 1, Handle: 1, HasHandle: true,
			LinkCredit: 3, HasLinkCredit: true}),
			amqpFrame(0, &Flow{NextIncomingID: 0, HasNextIncomingID: true, IncomingWindow: 10, OutgoingWindow: 1}),
			amqpFrame(0, &Disposition{Role: RoleReceiver, First: 0, Last: math.MaxUint32, HasLast: true, Settled: true, State: Released{}}),
			amqpFrame(0, &Disposition{Role: RoleReceiver, First: 1, Settled: true, State: Modified{DeliveryFailed: true}}),
			amqpFrame(0, &Disposition{Role: RoleSender, First: 0, Settled: true, State: Rejected{}}))},
		{5, body(amqpFrame(0, &Flow{IncomingWindow: 10, OutgoingWindow: 1, Handle: 1, HasHandle: true, LinkCredit: 0, HasLinkCredit: true, Drain: true, Echo: true}))},
		{5, body(amqpFrame(0, &Detach{Handle: 0, Error: &Error{Condition: ErrCondDetachForced}}), amqpFrame(0, &Detach{Handle: 0}),
			amqpFrame(0, &Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true}, msg...))},
		{5, body(end, amqpFrame(0, &Flow{IncomingWindow: 10, OutgoingWindow: 1}), convBegin, convAttachOut, closeF)},
		{5, body(closeF, closeF)},
		// Framing errors.
		{4, []byte{0, 0, 0, 4, 2, 0, 0, 0}},
		{4, []byte{0, 0, 0x20, 0, 2, 0, 0, 0}},
		{4, []byte{0, 0, 0, 8, 1, 0, 0, 0}},
		{4, []byte{0, 0, 0, 12, 2, 7, 0, 0, 0, 0x53, 0x18, 0x45}},
		{4, []byte{0, 0, 0, 12, 2, 0, 0, 0, 0, 0x53, 0x99, 0x45}},
		{4, []byte{0, 0, 0, 12, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}},
		{4, []byte{0, 0, 0, 100, 2, 0, 0}},
	}
}

func FuzzConnection(f *testing.F) {
	for _, s := range connSeeds() {
		f.Add(s.mode, s.data)
	}
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		runConnection(t, connInput(mode, data))
	})
}

// TestConversation runs the valid conversations of the fuzz seeds and
// checks that the server answered the interesting parts: the harness must
// reach the deep states it is meant to fuzz.
func TestConversation(t *testing.T) {
	for name, input := range map[string][]byte{
		"ours":   joinChunks(ourConversation()),
		"goamqp": joinChunks(goAmqpChunks()),
	} {
		t.Run(name, func(t *testing.T) {
			out := runConnection(t, input)
			seen := map[string]int{}
			for _, c := range splitStream(out) {
				if bytes.HasPrefix(c, []byte("AMQP")) {
					seen[string(c)]++
					continue
				}
				fr := newFrameReader(bytes.NewReader(c), 1<<20)
				f, err := fr.next()
				if err != nil {
					t.Fatalf("server frame % x: %v", c, err)
				}
				if len(f.body) == 0 {
					continue
				}
				code, d, err := framePerformative(f.body)
				if err != nil {
					t.Fatalf("server frame % x: %v", c, err)
				}
				p := newPerformative(code)
				if p == nil {
					t.Fatalf("server sent unknown performative 0x%x", code)
				}
				if err := p.decode(&d); err != nil {
					t.Fatalf("server performative %T: %v", p, err)
				}
				switch p := p.(type) {
				case *saslOutcome:
					if p.Code != saslOK {
						t.Errorf("sasl outcome %d", p.Code)
					}
				case *Disposition:
					if _, ok := p.State.(Accepted); ok && p.Role == RoleReceiver {
						seen["accepted"]++
					}
				case *Transfer:
					seen["transfer"]++
				case *testClose:
					if p.Error != nil {
						t.Errorf("server closed with %v", p.Error)
					}
				case *Detach:
					if p.Error != nil {
						t.Errorf("server detached with %v", p.Error)
					}
				}
				seen[reflect.TypeOf(p).Elem().Name()]++
			}
			for _, want := range []string{string(protoHeaderSASL[:]), string(protoHeaderAMQP[:]), "saslMechanisms", "saslOutcome",
				"Open", "Begin", "Attach", "Flow", "accepted", "transfer", "Detach", "testEnd", "testClose"} {
				if seen[want] == 0 {
					t.Errorf("the server sent no %q; saw %v", want, seen)
				}
			}
		})
	}
}

// TestServeConnSASLThenAMQP is a regression test: after SASL the protocol
// header must be read after the sasl-init frame, not from inside it.
func TestServeConnSASLThenAMQP(t *testing.T) {
	input := joinChunks([][]byte{protoHeaderSASL[:], convSASLInit, protoHeaderAMQP[:], convOpen, amqpFrame(0, &testClose{})})
	out := runConnection(t, input)
	chunks := splitStream(out)
	if len(chunks) < 6 || !bytes.Equal(chunks[3], protoHeaderAMQP[:]) {
		t.Fatalf("server answered % x", out)
	}
}

// FuzzDecodeValue: decoding arbitrary bytes never panics and fails only
// with errDecode; a decoded value encodes, and that encoding is stable.
func FuzzDecodeValue(f *testing.F) {
	for _, v := range sampleValues() {
		f.Add(mustEncode(f, v))
	}
	for _, enc := range validEncodings(f) {
		f.Add(enc)
	}
	for _, c := range goAmqpChunks() {
		if len(c) > 8 {
			f.Add(c[8:]) // frame bodies: described lists
		}
	}
	f.Add(testMessage("hello"))
	f.Add(unhex("e0 04 01 c0 01 00"))
	f.Add(unhex("f0 00 00 00 05 ff ff ff ff 40"))
	f.Add(nestedLists(maxNesting + 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := decoder{b: data}
		v, err := d.value()
		if err != nil {
			if !errors.Is(err, errDecode) {
				t.Fatalf("error %v does not wrap errDecode", err)
			}
			return
		}
		if d.off > len(data) {
			t.Fatalf("decoder offset %d beyond %d bytes", d.off, len(data))
		}
		enc1, err := appendValue(nil, v)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", v, err)
		}
		v2, err := decodeOne(enc1)
		if err != nil {
			t.Fatalf("re-encoding % x of %#v does not decode: %v", enc1, v, err)
		}
		enc2, err := appendValue(nil, v2)
		if err != nil {
			t.Fatalf("second encoding: %v", err)
		}
		if !bytes.Equal(enc1, enc2) {
			t.Fatalf("encoding is not stable:\n% x\n% x", enc1, enc2)
		}
	})
}

// FuzzPerformative: a frame body decodes into the struct of its
// descriptor or fails with errDecode; a decoded struct encodes, decodes to
// an equivalent struct, and encodes to the same bytes again.
func FuzzPerformative(f *testing.F) {
	for _, tc := range samplePerformatives() {
		f.Add(tc.p.append(nil))
	}
	for _, c := range append(goAmqpChunks(), ourConversation()...) {
		if len(c) > 8 && !bytes.HasPrefix(c, []byte("AMQP")) {
			f.Add(c[8:])
		}
	}
	for _, s := range sampleComposites() {
		f.Add(s.append(nil))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		code, d, err := framePerformative(body)
		if err != nil {
			if !errors.Is(err, errDecode) {
				t.Fatalf("error %v does not wrap errDecode", err)
			}
			return
		}
		if p := newPerformative(code); p != nil {
			if err := p.decode(&d); err != nil {
				if !errors.Is(err, errDecode) {
					t.Fatalf("%T: error %v does not wrap errDecode", p, err)
				}
			} else {
				checkPerformativeRoundTrip(t, code, p)
			}
		}
		// The composites that start with their own descriptor.
		for _, c := range []composite{new(Source), new(Target), new(testError), new(testState)} {
			d := decoder{b: body}
			if err := c.decode(&d); err != nil {
				if !errors.Is(err, errDecode) {
					t.Fatalf("%T: error %v does not wrap errDecode", c, err)
				}
				continue
			}
			checkCompositeRoundTrip(t, c, body[:d.off])
		}
	})
}

// checkPerformativeRoundTrip re-encodes a decoded performative.
func checkPerformativeRoundTrip(t *testing.T, code uint64, p codec) {
	t.Helper()
	enc1 := p.append(nil)
	code2, d, err := framePerformative(enc1)
	if err != nil || code2 != code {
		t.Fatalf("%T encodes to % x: code 0x%x, %v", p, enc1, code2, err)
	}
	q := newPerformative(code)
	if err := q.decode(&d); err != nil {
		t.Fatalf("%T: encoding % x does not decode: %v", p, enc1, err)
	}
	if d.remaining() != 0 {
		t.Fatalf("%T: %d bytes left after decoding % x", p, d.remaining(), enc1)
	}
	if enc2 := q.append(nil); !bytes.Equal(enc1, enc2) {
		t.Fatalf("%T: encoding is not stable:\n% x\n% x", p, enc1, enc2)
	}
	canonicalize(p)
	canonicalize(q)
	if !equivalent(reflect.ValueOf(p), reflect.ValueOf(q)) {
		t.Fatalf("%T changed in a round trip:\n got %+v\nwant %+v", p, q, p)
	}
}

func checkCompositeRoundTrip(t *testing.T, c composite, orig []byte) {
	t.Helper()
	enc1 := c.append(nil)
	q := reflect.New(reflect.TypeOf(c).Elem()).Interface().(composite)
	d := decoder{b: enc1}
	if err := q.decode(&d); err != nil || d.remaining() != 0 {
		t.Fatalf("%T from % x encodes to % x, which does not decode: %v", c, orig, enc1, err)
	}
	if enc2 := q.append(nil); !bytes.Equal(enc1, enc2) {
		t.Fatalf("%T: encoding is not stable:\n% x\n% x", c, enc1, enc2)
	}
	canonicalize(c)
	canonicalize(q)
	if !equivalent(reflect.ValueOf(c), reflect.ValueOf(q)) {
		t.Fatalf("%T changed in a round trip:\n got %+v\nwant %+v", c, q, c)
	}
}

// canonicalize applies the normalizations an encode/decode round trip is
// allowed to make: an empty multiple-symbol field is sent as null, a
// receiver's initial-delivery-count is not sent, and a disposition's last
// equal to first is left out.
func canonicalize(p any) {
	canonicalizeValue(reflect.ValueOf(p))
	switch p := p.(type) {
	case *Attach:
		if p.Role == RoleReceiver {
			p.InitialDeliveryCount = 0
		}
	case *Disposition:
		if p.HasLast && p.Last == p.First {
			p.HasLast, p.Last = false, 0
		}
	}
}

var (
	symbolsType = reflect.TypeFor[[]Symbol]()
	mapType     = reflect.TypeFor[Map]()
	anyType     = reflect.TypeFor[any]()
)

func canonicalizeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			canonicalizeValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if f.Type() == symbolsType && f.Len() == 0 && f.CanSet() {
				f.SetZero()
				continue
			}
			canonicalizeValue(f)
		}
	}
}

// equivalent compares two decoded composites. Values of type any and Map
// are compared by their encodings, which treats NaN like any other value.
func equivalent(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	if a.Type() == mapType || a.Type() == anyType {
		if a.Type() == mapType && a.IsNil() != b.IsNil() {
			return false
		}
		ea, erra := appendValue(nil, a.Interface())
		eb, errb := appendValue(nil, b.Interface())
		return erra == nil && errb == nil && bytes.Equal(ea, eb)
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equivalent(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equivalent(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equivalent(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	}
	return a.Interface() == b.Interface()
}

// FuzzFrameReader: the frame reader never panics, never returns a frame
// larger than its maximum, returns exactly the bytes of each frame, and
// fails only with EOF, unexpected EOF or a framing error.
func FuzzFrameReader(f *testing.F) {
	f.Add(uint16(512), joinChunks(goAmqpChunks()[3:]))
	f.Add(uint16(65535), joinChunks(ourConversation()[3:]))
	f.Add(uint16(100), joinChunks(goAmqpChunks()[3:]))
	f.Add(uint16(512), append(bytes.Clone(keepAlive), 0, 0, 0, 12, 3, 1, 0, 7, 1, 2, 3, 4))
	f.Add(uint16(512), []byte{0, 0, 0, 7, 2, 0, 0, 0})
	f.Add(uint16(512), []byte{0, 0, 0, 16, 5, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint16(512), []byte{0, 0, 0, 16, 2, 0})
	f.Fuzz(func(t *testing.T, maxSize uint16, data []byte) {
		limit := uint32(maxSize)
		fr := newFrameReader(bytes.NewReader(data), limit)
		off := 0
		for n := 0; ; n++ {
			if n > len(data)/8+1 {
				t.Fatalf("more frames than %d bytes can hold", len(data))
			}
			fr0, err := fr.next()
			if err != nil {
				var e *Error
				switch {
				case errors.Is(err, io.EOF):
					if off != len(data) {
						t.Fatalf("EOF at offset %d of %d", off, len(data))
					}
				case errors.Is(err, io.ErrUnexpectedEOF):
					if off == len(data) {
						t.Fatal("unexpected EOF at the end of a frame")
					}
				case errors.As(err, &e):
					if e.Condition != ErrCondFramingError {
						t.Fatalf("error condition %s", e.Condition)
					}
				default:
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			size := int(binary.BigEndian.Uint32(data[off:]))
			doff := int(data[off+4]) * 4
			if size > int(limit) || size < frameHeaderSize || doff < frameHeaderSize || doff > size {
				t.Fatalf("accepted a frame of size %d, doff %d, max %d", size, doff, limit)
			}
			if fr0.typ != data[off+5] || fr0.channel != binary.BigEndian.Uint16(data[off+6:]) {
				t.Fatalf("frame header mismatch at %d", off)
			}
			if !bytes.Equal(fr0.body, data[off+doff:off+size]) {
				t.Fatalf("frame body at %d is % x, want % x", off, fr0.body, data[off+doff:off+size])
			}
			off += size
		}
	})
}

// TestAttachEchoOfDecodedSource is a regression test: the server echoes
// the peer's source in its attach reply, so every value the decoder
// accepts in a source must encode again. An array8 of list8 holding an
// empty list (which the encoder writes as list0) made appendValueMust
// panic and took the whole process down.
func TestAttachEchoOfDecodedSource(t *testing.T) {
	source := hexOf(describedList(descSource, "a1 01 71", "40", "40", "40", "40", "40", "40",
		"c1 0a 02 a3 01 66 e0 04 01 c0 01 00", // filter {f: [[]] as array8 of list8}
		"e0 04 01 c0 01 00"))                  // default-outcome
	body := describedList(descAttach, "a1 01 6e", "43", "41", "40", "40", source, "00 53 29 45")
	p, err := decodePerformative(body)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.append(nil) // panicked before the fix
	out := runConnection(t, connInput(4, append(rawFrame(frameTypeAMQP, 0, body), amqpFrame(0, &testClose{})...)))
	attached := false
	for _, c := range splitStream(out) {
		if len(c) > 8 && !bytes.HasPrefix(c, []byte("AMQP")) {
			if p, err := decodePerformative(c[8:]); err == nil {
				if a, ok := p.(*Attach); ok && a.Source != nil && a.Source.Address == "q" {
					attached = true
				}
			}
		}
	}
	if !attached {
		t.Fatalf("no attach reply in % x", out)
	}
}
