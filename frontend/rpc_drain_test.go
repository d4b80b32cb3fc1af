package frontend_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// putTokenRequest is a put-token of a token that is no SAS token: the
// front-end answers it (401) on the reply link reply-to names.
func putTokenRequest(replyTo string) *goamqp.Message {
	return &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: "put-1", ReplyTo: &replyTo},
		ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": "sb://sb.test/q"},
		Value:                 "not a token",
	}
}

// TestReplyLinkDrainGoAMQP, in virtual time: a drain on a $cbs reply link
// (go-amqp's DrainCredit, which asks with link-credit 0) is answered at
// once, where it waited for the client's deadline before; a response that
// comes after it waits for the next credit.
func TestReplyLinkDrainGoAMQP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serveInMemory(t, frontend.Config{Backend: newMemBackend("q"), Rules: devRules(t)})
		ctx := t.Context()
		s, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := s.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{TargetAddress: "reply", Credit: -1})
		if err != nil {
			t.Fatal(err)
		}
		snd, err := s.NewSender(ctx, "$cbs", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.IssueCredit(3); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		drained := make(chan error, 1)
		go func() { drained <- rcv.DrainCredit(dctx, nil) }()
		synctest.Wait()
		select {
		case err := <-drained:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
		default:
			t.Fatal("a drain of a reply link is not answered when it is asked")
		}

		if err := snd.Send(ctx, putTokenRequest("reply"), nil); err != nil {
			t.Fatal(err)
		}
		sleepUntil(time.Now().Add(time.Minute))
		if m := rcv.Prefetched(); m != nil {
			t.Fatalf("a response arrived on a drained reply link: %v", m.ApplicationProperties)
		}
		if err := rcv.IssueCredit(1); err != nil {
			t.Fatal(err)
		}
		got := receiveAsync(ctx, rcv)
		synctest.Wait()
		r, ok := receivedYet(got)
		if !ok || r.err != nil || r.msg.ApplicationProperties["status-code"] != int32(401) {
			t.Fatalf("the response once credit came: %v (answered: %v), want a 401", r.err, ok)
		}
	})
}

// TestReplyLinkDrainWithCreditLeft, in virtual time, in raw frames: a
// client that asks to drain with credit left (as rhea and Proton can) on a
// $management reply link that holds a response gets the response, then a
// flow with the rest of its credit used up: delivery-count 3 and
// link-credit 0 of a credit of 3. Before, no flow came back.
func TestReplyLinkDrainWithCreditLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := serveInMemory(t, frontend.Config{Backend: newMemBackend("q"), Rules: devRules(t)})
		nc, err := f.ln.DialContext(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := &rawClient{t: t, nc: nc}
		c.handshake()
		frames := make(chan rawFrame, 64)
		go c.readFrames(frames)

		const reply, request = 0, 1
		c.write(rawAttach("reply", reply, true, "q/$management", "reply"))
		c.write(rawAttach("request", request, false, "", "q/$management"))
		synctest.Wait()
		if fl, ok := lastFlow(frames, request); !ok || fl.credit == 0 {
			t.Fatalf("no credit on the request link: %+v", fl)
		}
		replyTo := "reply"
		payload, err := (&amqp.Message{
			Properties:            &amqp.Properties{MessageID: "peek-1", ReplyTo: replyTo},
			ApplicationProperties: amqp.Map{{Key: "operation", Value: "com.microsoft:peek-message"}},
			Value:                 amqp.Map{{Key: "from-sequence-number", Value: int64(1)}, {Key: "message-count", Value: int32(1)}},
			HasValue:              true,
		}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.write(append(rawTransfer(request, 0), payload...))
		synctest.Wait()
		if n := transfers(frames, reply); n != 0 {
			t.Fatalf("%d responses sent without credit", n)
		}

		c.write(rawFlow(reply, 0, 3, true))
		synctest.Wait()
		var got []rawFrame
		for len(frames) > 0 {
			got = append(got, <-frames)
		}
		sent, drained := 0, false
		for _, fr := range got {
			switch {
			case fr.code == codeTransfer && fr.handle == reply:
				sent++
			case fr.code == codeFlow && fr.handle == reply:
				if fr.deliveryCount != 3 || fr.credit != 0 {
					t.Fatalf("the flow that answers the drain has delivery-count %d and link-credit %d, want 3 and 0", fr.deliveryCount, fr.credit)
				}
				drained = true
			}
		}
		if sent != 1 || !drained {
			t.Fatalf("after a drain with credit 3: %d responses and a flow back: %v (frames %+v); want the held response and the flow", sent, drained, got)
		}
	})
}

// A minimal AMQP 1.0 client in raw frames, for what go-amqp cannot send:
// it writes the few performatives the test needs and reads back the
// handle, delivery-count and link-credit of flows and transfers.

const (
	codeBegin    = 0x11
	codeAttach   = 0x12
	codeFlow     = 0x13
	codeTransfer = 0x14
)

type rawClient struct {
	t  *testing.T
	nc net.Conn
}

// rawFrame is a frame read: its performative's code and, of a flow or a
// transfer, the link's handle; of a flow, its delivery-count and credit.
type rawFrame struct {
	code                  uint64
	handle                uint32
	deliveryCount, credit uint32
}

func (c *rawClient) write(body []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(rawFrameBytes(0, body)); err != nil {
		c.t.Fatal(err)
	}
}

// handshake logs in by SASL PLAIN with the emulator's rule, then opens
// the connection and begins session 0.
func (c *rawClient) handshake() {
	c.t.Helper()
	c.mustWrite([]byte("AMQP\x03\x01\x00\x00"))
	c.readHeader()
	c.readFrame() // sasl-mechanisms
	resp := "\x00" + sas.DevKeyName + "\x00" + sas.DevKey
	c.mustWrite(rawFrameBytes(1, described(0x41, list(sym("PLAIN"), vbin([]byte(resp))))))
	c.readFrame() // sasl-outcome
	c.mustWrite([]byte("AMQP\x00\x01\x00\x00"))
	c.readHeader()
	c.write(described(0x10, list(str("raw"), str(memHost))))
	c.write(described(codeBegin, list(null(), uintv(0), uintv(1000), uintv(1000))))
}

func (c *rawClient) mustWrite(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) readHeader() {
	c.t.Helper()
	h := make([]byte, 8)
	if _, err := io.ReadFull(c.nc, h); err != nil {
		c.t.Fatal(err)
	}
}

// readFrame reads one frame and returns its body.
func (c *rawClient) readFrame() []byte {
	b, err := readRawFrame(c.nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

func readRawFrame(r io.Reader) ([]byte, error) {
	h := make([]byte, 8)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	size, doff := binary.BigEndian.Uint32(h), int(h[4])*4
	rest := make([]byte, size-8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return rest[doff-8:], nil
}

// readFrames hands out the frames the front-end sends, decoded, until the
// connection ends.
func (c *rawClient) readFrames(out chan<- rawFrame) {
	for {
		body, err := readRawFrame(c.nc)
		if err != nil {
			return
		}
		if len(body) == 0 {
			continue // a heartbeat
		}
		d := rawDecoder{b: body}
		code, fields := d.performative()
		fr := rawFrame{code: code}
		field := func(i int) uint32 {
			if i < len(fields) {
				if v, ok := fields[i].(uint64); ok {
					return uint32(v)
				}
			}
			return 0
		}
		switch code {
		case codeFlow:
			fr.handle, fr.deliveryCount, fr.credit = field(4), field(5), field(6)
		case codeTransfer:
			fr.handle = field(0)
		}
		out <- fr
	}
}

// lastFlow takes the frames read so far and returns the last flow of
// handle among them.
func lastFlow(frames chan rawFrame, handle uint32) (rawFrame, bool) {
	var last rawFrame
	found := false
	for len(frames) > 0 {
		if fr := <-frames; fr.code == codeFlow && fr.handle == handle {
			last, found = fr, true
		}
	}
	return last, found
}

// transfers takes the frames read so far and counts the transfers of
// handle among them.
func transfers(frames chan rawFrame, handle uint32) int {
	n := 0
	for len(frames) > 0 {
		if fr := <-frames; fr.code == codeTransfer && fr.handle == handle {
			n++
		}
	}
	return n
}

func rawFrameBytes(typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	return append(append(b, 2, typ, 0, 0), body...)
}

// rawAttach attaches a link: a receiver (the client receives) from
// source, or a sender to target.
func rawAttach(name string, handle uint32, receiver bool, source, target string) []byte {
	src, tgt := null(), null()
	if source != "" {
		src = described(0x28, list(str(source)))
	}
	if target != "" {
		tgt = described(0x29, list(str(target)))
	}
	fields := [][]byte{str(name), uintv(handle), boolv(receiver), null(), null(), src, tgt}
	if !receiver {
		fields = append(fields, null(), null(), uintv(0)) // initial-delivery-count
	}
	return described(codeAttach, list(fields...))
}

// rawFlow gives a link credit from deliveryCount, asking to drain.
func rawFlow(handle, deliveryCount, credit uint32, drain bool) []byte {
	return described(codeFlow, list(uintv(0), uintv(1000), uintv(0), uintv(1000), uintv(handle), uintv(deliveryCount), uintv(credit), null(), boolv(drain)))
}

// rawTransfer is a settled transfer's performative; its payload follows.
func rawTransfer(handle, id uint32) []byte {
	return described(codeTransfer, list(uintv(handle), uintv(id), vbin([]byte{byte(id)}), uintv(0), boolv(true)))
}

func described(code byte, v []byte) []byte { return append([]byte{0x00, 0x53, code}, v...) }
func null() []byte                         { return []byte{0x40} }
func uintv(v uint32) []byte                { return binary.BigEndian.AppendUint32([]byte{0x70}, v) }
func str(s string) []byte                  { return append([]byte{0xa1, byte(len(s))}, s...) }
func sym(s string) []byte                  { return append([]byte{0xa3, byte(len(s))}, s...) }
func vbin(b []byte) []byte                 { return append([]byte{0xa0, byte(len(b))}, b...) }

func boolv(b bool) []byte {
	if b {
		return []byte{0x41}
	}
	return []byte{0x42}
}

func list(fields ...[]byte) []byte {
	var body []byte
	for _, f := range fields {
		body = append(body, f...)
	}
	b := binary.BigEndian.AppendUint32([]byte{0xd0}, uint32(4+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(fields)))
	return append(b, body...)
}

// rawDecoder reads the values a flow or a transfer performative holds:
// unsigned integers become uint64, booleans bool, null nil; other values
// are skipped as nil.
type rawDecoder struct {
	b   []byte
	err error
}

func (d *rawDecoder) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = fmt.Errorf("short value")
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// performative reads a described list: its descriptor's code and fields.
func (d *rawDecoder) performative() (uint64, []any) {
	if d.take(1)[0] != 0x00 {
		return 0, nil
	}
	code, _ := d.value().(uint64)
	fields, _ := d.value().([]any)
	return code, fields
}

func (d *rawDecoder) value() any {
	c := d.take(1)[0]
	switch c {
	case 0x00: // described: the descriptor, then the value
		d.value()
		return d.value()
	case 0x40:
		return nil
	case 0x41:
		return true
	case 0x42:
		return false
	case 0x56:
		return d.take(1)[0] != 0
	case 0x43, 0x44:
		return uint64(0)
	case 0x50, 0x52, 0x53:
		return uint64(d.take(1)[0])
	case 0x60:
		return uint64(binary.BigEndian.Uint16(d.take(2)))
	case 0x70:
		return uint64(binary.BigEndian.Uint32(d.take(4)))
	case 0x80:
		return binary.BigEndian.Uint64(d.take(8))
	case 0x45:
		return []any{}
	case 0xc0, 0xd0:
		var count int
		if c == 0xc0 {
			d.take(1)
			count = int(d.take(1)[0])
		} else {
			d.take(4)
			count = int(binary.BigEndian.Uint32(d.take(4)))
		}
		out := make([]any, 0, count)
		for range count {
			out = append(out, d.value())
		}
		return out
	}
	// Anything else (strings, binaries, maps, arrays) by its size.
	switch c >> 4 {
	case 0xa, 0xc, 0xe:
		d.take(int(d.take(1)[0]))
	case 0xb, 0xd, 0xf:
		d.take(int(binary.BigEndian.Uint32(d.take(4))))
	default:
		switch c >> 4 {
		case 0x5:
			d.take(1)
		case 0x6:
			d.take(2)
		case 0x7:
			d.take(4)
		case 0x8:
			d.take(8)
		case 0x9:
			d.take(16)
		}
	}
	return nil
}

// TestReceiverDrainDuringLongPoll, in virtual time, in raw frames: a
// client that gives a queue's receiver credit, then asks to drain with
// that credit left (the JS SDK does so when its receive's wait is over,
// and closes the link when the answer is late) while the front-end long-
// polls the empty queue, gets the flow that uses the credit up at once,
// not when the poll ends. Before, the poll took messages and could not be
// cancelled, so the drain waited for it.
func TestReceiverDrainDuringLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 20 * time.Second
		f := serveInMemory(t, frontend.Config{Backend: newMemBackend("q"), Rules: devRules(t), ReceiveWait: wait})
		nc, err := f.ln.DialContext(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := &rawClient{t: t, nc: nc}
		c.handshake()
		frames := make(chan rawFrame, 64)
		go c.readFrames(frames)

		const link = 0
		c.write(rawAttach("rcv", link, true, "q", ""))
		c.write(rawFlow(link, 0, 3, false))
		time.Sleep(time.Second) // into the long poll
		synctest.Wait()
		for len(frames) > 0 {
			<-frames
		}
		asked := time.Now()
		c.write(rawFlow(link, 0, 3, true))
		synctest.Wait()
		fl, ok := lastFlow(frames, link)
		if !ok || fl.deliveryCount != 3 || fl.credit != 0 {
			t.Fatalf("%v after a drain of credit 3 during a long poll: flow %+v (found %v); want delivery-count 3, link-credit 0 at once", time.Since(asked), fl, ok)
		}
	})
}
