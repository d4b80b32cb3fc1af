package amqp

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The raw benchmarks drive the engine with a client that writes
// pre-encoded frames and does no per-message work, so that every cycle and
// allocation they report is the server's. They complement the go-amqp
// benchmarks in amqptest, whose figures the client's cost dominates.

type benchSink struct{}

func (benchSink) OpenConn(*Conn) (ConnHandler, error) { return benchSink{}, nil }
func (benchSink) Closed(error)                        {}
func (benchSink) Attach(*Link) (LinkHandler, error)   { return benchSink{}, nil }
func (benchSink) Detached(*Link, error)               {}
func (benchSink) Message(l *Link, d *Delivery) {
	if !d.Settled {
		l.Settle(d.ID, Accepted{})
	}
}

// benchSource sends pre-built messages as fast as credit allows.
type benchSource struct{ payload []byte }

func (s *benchSource) OpenConn(*Conn) (ConnHandler, error) { return s, nil }
func (s *benchSource) Closed(error)                        {}
func (s *benchSource) Attach(*Link) (LinkHandler, error)   { return s, nil }
func (s *benchSource) Detached(*Link, error)               {}
func (s *benchSource) Flow(l *Link, credit uint32, drain bool) {
	tag := []byte{0, 0, 0, 0}
	for range credit {
		if _, err := l.Send(tag, s.payload, false); err != nil {
			return
		}
	}
}
func (s *benchSource) Disposition(l *Link, id uint32, state DeliveryState, settled bool) {
	if !settled {
		l.Settle(id, Accepted{})
	}
}

// rawClient is a minimal AMQP client: header, open, begin, one attach.
type rawClient struct {
	nc net.Conn
	fr *frameReader
	w  *bufio.Writer
}

func dialRaw(b *testing.B, addr string, attach Attach) *rawClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	c := &rawClient{nc: nc, fr: newFrameReader(nc, 1<<20), w: bufio.NewWriterSize(nc, 256<<10)}
	c.w.Write(protoHeaderAMQP[:])
	c.frame(0, (&Open{ContainerID: "bench", MaxFrameSize: 1 << 20}).append)
	c.frame(0, (&Begin{NextOutgoingID: 0, IncomingWindow: 1 << 30, OutgoingWindow: 1 << 30}).append)
	c.frame(0, attach.append)
	c.w.Flush()
	if _, err := c.fr.protoHeader(); err != nil {
		b.Fatal(err)
	}
	for range 3 { // open, begin, attach
		if _, err := c.fr.next(); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func (c *rawClient) frame(ch uint16, body func([]byte) []byte) {
	buf, start := appendFrameHeader(nil, frameTypeAMQP, ch)
	c.w.Write(finishFrame(body(buf), start))
}

func startBenchServer(b *testing.B, h Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &Server{Handler: h, LinkCredit: 5000, SessionWindow: 20000}
	go srv.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// BenchmarkRawSendSettled: 1 KiB transfers pipelined on one link, each
// settled by the server (dispositions coalesce into ranges); at most 2,000
// unsettled at a time.
func BenchmarkRawSendSettled(b *testing.B) {
	addr := startBenchServer(b, benchSink{})
	c := dialRaw(b, addr, Attach{Name: "s", Handle: 0, Role: RoleSender, Target: &Target{Address: "q"}})
	// Wait for the server's credit.
	if _, err := c.fr.next(); err != nil {
		b.Fatal(err)
	}
	payload := append([]byte{0x00, 0x53, 0x75, 0xb0, 0, 0, 4, 0}, make([]byte, 1024)...)
	const inflight = 2000
	var settled atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		var d Disposition
		for {
			f, err := c.fr.next()
			if err != nil {
				readErr <- err
				return
			}
			code, dec, err := framePerformative(f.body)
			if err != nil || code != descDisposition {
				continue
			}
			if err := d.decode(&dec); err != nil {
				readErr <- err
				return
			}
			last := d.First
			if d.HasLast {
				last = d.Last
			}
			settled.Add(int64(last-d.First) + 1)
		}
	}()

	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.SetBytes(1024)
	b.ResetTimer()
	var buf []byte
	t := Transfer{HasDeliveryID: true, DeliveryTag: []byte{1, 2, 3, 4}, HasMessageFormat: true}
	for sent := 0; sent < b.N; {
		for int64(sent)-settled.Load() >= inflight {
			runtime.Gosched()
		}
		batch := min(b.N-sent, inflight-int(int64(sent)-settled.Load()), 200)
		buf = buf[:0]
		for range batch {
			t.DeliveryID = uint32(sent)
			var start int
			buf, start = appendFrameHeader(buf, frameTypeAMQP, 0)
			buf = finishFrame(append(t.append(buf), payload...), start)
			sent++
		}
		if _, err := c.nc.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	for settled.Load() < int64(b.N) {
		select {
		case err := <-readErr:
			b.Fatal(err)
		default:
			runtime.Gosched()
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "server-allocs/msg")
	c.nc.Close()
}

// BenchmarkRawReceive: the server sends 1 KiB messages on credit; the
// client settles them in ranges (receiver settle mode first), as a
// draining consumer would.
func BenchmarkRawReceive(b *testing.B) {
	payload := append([]byte{0x00, 0x53, 0x75, 0xb0, 0, 0, 4, 0}, make([]byte, 1024)...)
	addr := startBenchServer(b, &benchSource{payload: payload})
	c := dialRaw(b, addr, Attach{Name: "r", Handle: 0, Role: RoleReceiver, Source: &Source{Address: "q"}})

	const credit = 2000
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.SetBytes(1024)
	b.ResetTimer()
	flow := Flow{HasNextIncomingID: true, IncomingWindow: 1 << 30, OutgoingWindow: 1 << 30, HasHandle: true, HasDeliveryCount: true, HasLinkCredit: true}
	var t Transfer
	received, granted := 0, 0
	var first uint32
	var buf []byte
	grant := func() {
		n := min(credit, b.N-granted)
		flow.DeliveryCount, flow.LinkCredit = uint32(received), uint32(n+granted-received)
		flow.NextIncomingID = uint32(received)
		buf = buf[:0]
		var start int
		if received > int(first) {
			d := Disposition{Role: RoleReceiver, First: first, Last: uint32(received - 1), HasLast: true, Settled: true, State: Accepted{}}
			buf, start = appendFrameHeader(buf, frameTypeAMQP, 0)
			buf = finishFrame(d.append(buf), start)
			first = uint32(received)
		}
		buf, start = appendFrameHeader(buf, frameTypeAMQP, 0)
		buf = finishFrame(flow.append(buf), start)
		c.nc.Write(buf)
		granted += n
	}
	grant()
	for received < b.N {
		f, err := c.fr.next()
		if err != nil {
			b.Fatal(err)
		}
		code, dec, err := framePerformative(f.body)
		if err != nil || code != descTransfer {
			continue
		}
		if err := t.decode(&dec); err != nil {
			b.Fatal(err)
		}
		received++
		if granted-received < credit/2 && granted < b.N {
			grant()
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "server-allocs/msg")
	c.nc.Close()
}
