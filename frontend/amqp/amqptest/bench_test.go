package amqptest_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

// The engine benchmarks measure the protocol engine alone: the server's
// handlers do no work beyond settling, so the figures bound what the
// broker can get out of one connection. docs/performance.md records them.

// sink accepts every message and settles it at once.
type sink struct{ n atomic.Int64 }

func (s *sink) OpenConn(*amqp.Conn) (amqp.ConnHandler, error) { return s, nil }
func (s *sink) Closed(error)                                  {}
func (s *sink) Attach(*amqp.Link) (amqp.LinkHandler, error)   { return s, nil }
func (s *sink) Detached(*amqp.Link, error)                    {}
func (s *sink) Message(l *amqp.Link, d *amqp.Delivery) {
	s.n.Add(1)
	if !d.Settled {
		l.Settle(d.ID, amqp.Accepted{})
	}
}

func startServer(b *testing.B, h amqp.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &amqp.Server{Handler: h, LinkCredit: 5000}
	go srv.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// latencies collects per-message latencies from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	q := func(p float64) float64 { return float64(l.d[int(p*float64(len(l.d)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkGoAMQPSendSettled: pipelined 1 KiB sends on one link of one
// connection, each settled by the server's disposition; `window` sends are
// in flight at once.
func BenchmarkGoAMQPSendSettled(b *testing.B) {
	for _, window := range []int{1, 64, 512} {
		b.Run("window="+itoa(window), func(b *testing.B) {
			addr := startServer(b, &sink{})
			c := dial(b, addr, nil)
			s := session(b, c)
			ctx := context.Background()
			snd, err := s.NewSender(ctx, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			var lat latencies
			var next atomic.Int64
			b.SetBytes(1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range window {
				wg.Add(1)
				go func() {
					defer wg.Done()
					local := make([]time.Duration, 0, b.N/window+1)
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
							b.Error(err)
							return
						}
						local = append(local, time.Since(t0))
					}
					lat.add(local)
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			lat.report(b)
		})
	}
}

// BenchmarkGoAMQPSendReceive: the same pipelined sends through the test
// broker's queue while a receiver on a second connection takes and accepts
// every message (receiver settle mode second, as peek-lock uses).
func BenchmarkGoAMQPSendReceive(b *testing.B) {
	addr := startServer(b, &amqptest.Broker{})
	ctx := context.Background()
	sc := session(b, dial(b, addr, nil))
	rc := session(b, dial(b, addr, nil))
	snd, err := sc.NewSender(ctx, "q", nil)
	if err != nil {
		b.Fatal(err)
	}
	rcv, err := rc.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(), Credit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	done := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			m, err := rcv.Receive(ctx, nil)
			if err != nil {
				done <- err
				return
			}
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}
