// Package loadtool is `quorumbus bench`: it drives any AMQP 1.0 endpoint
// with go-amqp and reports throughput, latency and the CPU each message
// cost. It lives beside the broker's binary, not inside its main package.
package loadtool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// benchConfig is what `quorumbus bench` drives: any AMQP 1.0 endpoint,
// through github.com/Azure/go-amqp (the client under the Azure SDKs).
type benchConfig struct {
	url         string
	addresses   []string // each connection opens its links to every one
	mode        string   // send, receive, both
	conns       int
	links       int
	size        int
	count       int
	duration    time.Duration
	window      int // sends in flight per link
	credit      int // receiver credit per link
	receiveMode string
	serverPid   int // a local server whose CPU to report, or 0
	coalesce    bool
	keyName     string // SASL PLAIN: an authorization rule's name
	key         string // and one of its keys
	caFile      string // amqps: the CA to trust besides the system's
	properties  map[string]any
	subject     string
}

// benchGCPercent is the load tool's default GC percent. Its live heap is a
// few megabytes (the messages in flight), so at Go's default of 100 it
// collects several times a second under load, on the cores the server
// being measured shares. At 400 the heap stays small and the client takes
// less of the machine per message received (the commit that set it has
// the measurements).
const benchGCPercent = 400

// benchFlags defines the flags of a run on fs, writing them into c.
// What belongs to the process (its GC percent, a CPU profile) is
// Command's alone, so that Run leaves the process it runs in as it is.
func benchFlags(fs *flag.FlagSet, c *benchConfig) (finish func() error) {
	fs.StringVar(&c.url, "url", "amqp://127.0.0.1:5672", "AMQP endpoint")
	queues := fs.String("queue", "bench", "queue (link address) to use; several, comma-separated (a topic's subscriptions: t/Subscriptions/s1,t/Subscriptions/s2): each connection opens -links links to each")
	fs.StringVar(&c.mode, "mode", "both", "send, receive, or both (senders and receivers at once)")
	fs.IntVar(&c.conns, "conns", 1, "connections per role")
	fs.IntVar(&c.links, "links", 1, "links per connection (and address)")
	fs.IntVar(&c.size, "size", 1024, "message body size in bytes")
	fs.IntVar(&c.count, "count", 100000, "messages to send (and receive) in all; 0 runs for -duration")
	fs.DurationVar(&c.duration, "duration", 0, "run for this long instead of a count")
	fs.IntVar(&c.window, "window", 256, "sends in flight per sender link (1 = synchronous)")
	fs.IntVar(&c.credit, "credit", 1000, "credit per receiver link")
	fs.StringVar(&c.receiveMode, "receive-mode", "peeklock", "peeklock (receive, then complete) or receiveanddelete")
	fs.IntVar(&c.serverPid, "server-pid", 0, "pid of a server on this machine whose CPU per message to report (Linux)")
	fs.BoolVar(&c.coalesce, "coalesce", true, "gather the frames written while a write is in flight into one write(2) (under TLS for amqps://; a synchronous sender never has two)")
	// The emulator's well-known rule, which `quorumbus dev` serves.
	fs.StringVar(&c.keyName, "key-name", "RootManageSharedAccessKey", "authorization rule to log in with (SASL PLAIN); empty: SASL ANONYMOUS")
	fs.StringVar(&c.key, "key", "SAS_KEY_VALUE", "key of the -key-name rule")
	fs.StringVar(&c.caFile, "ca", "", "amqps:// only: PEM file of a CA to trust besides the system's (quorumbus dev prints its own)")
	fs.Func("property", "name=value: an application property of every message sent (a long when value is an integer, else a string; repeat the flag for more), for a topic's filters to read", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("want name=value, got %q", v)
		}
		if c.properties == nil {
			c.properties = map[string]any{}
		}
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			c.properties[name] = n
		} else {
			c.properties[name] = value
		}
		return nil
	})
	fs.StringVar(&c.subject, "subject", "", "the subject (Label) of every message sent")
	return func() error {
		for _, a := range strings.Split(*queues, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.addresses = append(c.addresses, a)
			}
		}
		switch {
		case len(c.addresses) == 0:
			return errors.New("bench: -queue names no address")
		case c.count == 0 && c.duration == 0:
			return errors.New("bench: give -count or -duration")
		case c.conns < 1 || c.links < 1 || c.window < 1 || c.credit < 1:
			return errors.New("bench: -conns, -links, -window and -credit must be at least 1")
		}
		return nil
	}
}

// Command runs `quorumbus bench` with its command-line arguments.
func Command(args []string) error {
	var c benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	finish := benchFlags(fs, &c)
	cpuProfile := fs.String("cpuprofile", "", "write the load tool's own CPU profile to this file (to see what the client costs)")
	gcPercent := fs.Int("gogc", benchGCPercent, "the load tool's GC percent (as GOGC; the GOGC environment variable, when set, wins)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus bench [flags]\n\nDrives an AMQP 1.0 endpoint with pipelined sends and/or peek-lock receives,\nthen prints msgs/s, MB/s, latency percentiles (of sends; with -mode both also\nfrom send to receive) and CPU per message (a progress line each second).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*gcPercent)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	_, err := runBench(context.Background(), c, os.Stdout)
	return err
}

// Figures are what one run counted.
type Figures struct {
	Sent, Received int64
	Elapsed        time.Duration
}

// SendRate and ReceiveRate are messages per second over the whole run.
func (f Figures) SendRate() float64    { return float64(f.Sent) / f.Elapsed.Seconds() }
func (f Figures) ReceiveRate() float64 { return float64(f.Received) / f.Elapsed.Seconds() }

// Run is `quorumbus bench` for a program that measures from inside (a Go
// benchmark that starts a cluster in its own process): the same flags,
// less -gogc and -cpuprofile, which would change that process; the
// report goes to out.
func Run(ctx context.Context, args []string, out io.Writer) (Figures, error) {
	var c benchConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	finish := benchFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return Figures{}, err
	}
	if err := finish(); err != nil {
		return Figures{}, err
	}
	return runBench(ctx, c, out)
}

// benchStats collects latencies per goroutine and merges them at the end,
// so that measuring costs no lock per message.
type benchStats struct {
	mu       sync.Mutex
	lat      []time.Duration // send: until the broker accepted
	e2e      []time.Duration // both: from send to receive (sentAtProperty)
	sent     atomic.Int64
	received atomic.Int64
	errors   atomic.Int64
	firstErr atomic.Pointer[error] // the first error, shown on the progress line once
}

// fail counts an error and keeps the first.
func (s *benchStats) fail(err error) {
	s.errors.Add(1)
	s.firstErr.CompareAndSwap(nil, &err)
}

func (s *benchStats) merge(l []time.Duration) {
	s.mu.Lock()
	s.lat = append(s.lat, l...)
	s.mu.Unlock()
}

func (s *benchStats) mergeE2E(l []time.Duration) {
	s.mu.Lock()
	s.e2e = append(s.e2e, l...)
	s.mu.Unlock()
}

// sentAtProperty is the application property in which senders of a run
// that also receives put the time of sending (Unix nanoseconds), so that
// receivers measure the latency from send to receive. Senders and
// receivers share this process's clock.
const sentAtProperty = "quorumbus-bench-sent-at"

func runBench(ctx context.Context, c benchConfig, out io.Writer) (Figures, error) {
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	var st benchStats
	payload := make([]byte, c.size)
	var wg sync.WaitGroup
	perRole := c.conns * c.links * len(c.addresses) // links of each role
	errc := make(chan error, 2*perRole)
	quota := func(n int) int { // this link's share of -count
		if c.count == 0 {
			return 0
		}
		return c.count/perRole + btoi(n < c.count%perRole)
	}
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	dial := func(coalesce bool) (*goamqp.Session, error) {
		conn, err := c.dial(ctx, coalesce)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { conn.Close() })
		return conn.NewSession(ctx, nil)
	}
	start := time.Now()
	meter := startCPUMeter(c.serverPid)
	if c.mode == "send" || c.mode == "both" {
		n := 0
		for range c.conns {
			sess, err := dial(c.coalesce && c.window > 1)
			if err != nil {
				return Figures{}, err
			}
			for range c.links {
				for _, addr := range c.addresses {
					snd, err := sess.NewSender(ctx, addr, nil)
					if err != nil {
						return Figures{}, err
					}
					q := quota(n)
					n++
					wg.Add(1)
					go func() {
						defer wg.Done()
						errc <- benchSend(ctx, snd, c.message(payload), q, c.window, c.mode == "both", &st)
					}()
				}
			}
		}
	}
	if c.mode == "receive" || c.mode == "both" {
		for range c.conns {
			sess, err := dial(c.coalesce)
			if err != nil {
				return Figures{}, err
			}
			for i := range c.links * len(c.addresses) {
				addr := c.addresses[i%len(c.addresses)]
				opts := &goamqp.ReceiverOptions{Credit: int32(c.credit), SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()}
				if c.receiveMode == "receiveanddelete" {
					opts.SettlementMode = goamqp.ReceiverSettleModeFirst.Ptr()
					opts.RequestedSenderSettleMode = goamqp.SenderSettleModeSettled.Ptr()
				}
				rcv, err := sess.NewReceiver(ctx, addr, opts)
				if err != nil {
					return Figures{}, err
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					errc <- benchReceive(ctx, rcv, c.count, c.credit, c.receiveMode != "receiveanddelete", c.mode == "both", &st)
				}()
			}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastS, lastR int64
	shown := false
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
			s, r := st.sent.Load(), st.received.Load()
			fmt.Fprintf(out, "%6.1fs  sent %9d (%7d/s)  received %9d (%7d/s)  errors %d\n",
				time.Since(start).Seconds(), s, s-lastS, r, r-lastR, st.errors.Load())
			lastS, lastR = s, r
			if e := st.firstErr.Load(); e != nil && !shown {
				fmt.Fprintf(out, "        first error: %v\n", *e)
				shown = true
			}
		}
	}
	elapsed := time.Since(start)
	close(errc)
	var firstErr error
	for err := range errc {
		if err != nil && firstErr == nil && !errors.Is(err, context.DeadlineExceeded) {
			firstErr = err
		}
	}
	report(out, c, &st, elapsed)
	meter.report(out, max(st.sent.Load(), st.received.Load()), elapsed)
	return Figures{Sent: st.sent.Load(), Received: st.received.Load(), Elapsed: elapsed}, firstErr
}

// message is what a sender sends: the payload with -property and -subject.
// Each send takes a copy (the sent-at stamp is per message).
func (c *benchConfig) message(payload []byte) func() *goamqp.Message {
	return func() *goamqp.Message {
		m := goamqp.NewMessage(payload)
		if len(c.properties) > 0 {
			m.ApplicationProperties = maps.Clone(c.properties)
		}
		if c.subject != "" {
			m.Properties = &goamqp.MessageProperties{Subject: &c.subject}
		}
		return m
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// benchSend keeps `window` sends in flight on one link.
func benchSend(ctx context.Context, snd *goamqp.Sender, message func() *goamqp.Message, n, window int, stamp bool, st *benchStats) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, window)
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			defer func() { st.merge(lat) }()
			for n == 0 || next.Add(1) <= int64(n) {
				t0 := time.Now()
				m := message()
				if stamp {
					if m.ApplicationProperties == nil {
						m.ApplicationProperties = map[string]any{}
					}
					m.ApplicationProperties[sentAtProperty] = t0.UnixNano()
				}
				if err := snd.Send(ctx, m, nil); err != nil {
					if ctx.Err() != nil {
						return
					}
					st.fail(err)
					errc <- err
					return
				}
				lat = append(lat, time.Since(t0))
				st.sent.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// benchReceive receives until the receivers of all links together have n
// messages (one shared count: a fixed share per link would strand the
// messages a finished link had prefetched until their locks expire) and, in
// peek-lock, completes them from
// a pool of goroutines, as a consumer with prefetch does: completing one at
// a time would measure one round trip per message, not the broker.
func benchReceive(ctx context.Context, rcv *goamqp.Receiver, n, credit int, complete, measure bool, st *benchStats) error {
	var wg sync.WaitGroup
	msgs := make(chan *goamqp.Message, credit)
	errc := make(chan error, 1)
	fail := func(err error) {
		st.fail(err)
		select {
		case errc <- err:
		default:
		}
	}
	if complete {
		// As many completes in flight as the credit lets messages in.
		for range max(64, min(cap(msgs), 512)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for m := range msgs {
					if err := rcv.AcceptMessage(ctx, m); err != nil {
						if ctx.Err() == nil {
							fail(err)
						}
						continue
					}
					st.received.Add(1)
				}
			}()
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // stop waiting once the other links completed the count
		for n > 0 && rctx.Err() == nil {
			if st.received.Load() >= int64(n) {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var e2e []time.Duration
	defer func() { st.mergeE2E(e2e) }()
	for n == 0 || st.received.Load()+int64(len(msgs)) < int64(n) {
		m, err := rcv.Receive(rctx, nil)
		if err != nil {
			if rctx.Err() == nil {
				fail(err)
			}
			break
		}
		if at, ok := m.ApplicationProperties[sentAtProperty].(int64); ok && measure {
			e2e = append(e2e, time.Since(time.Unix(0, at)))
		}
		if complete {
			msgs <- m
		} else {
			st.received.Add(1)
		}
	}
	close(msgs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

func report(out io.Writer, c benchConfig, st *benchStats, elapsed time.Duration) {
	secs := elapsed.Seconds()
	s, r := st.sent.Load(), st.received.Load()
	fmt.Fprintf(out, "\n%s mode=%s conns=%d links=%d size=%d window=%d credit=%d\n", c.url, c.mode, c.conns, c.links, c.size, c.window, c.credit)
	fmt.Fprintf(out, "elapsed %.2fs  errors %d\n", secs, st.errors.Load())
	if s > 0 {
		fmt.Fprintf(out, "send:    %8.0f msgs/s  %7.2f MB/s\n", float64(s)/secs, float64(s)*float64(c.size)/secs/1e6)
	}
	if r > 0 {
		fmt.Fprintf(out, "receive: %8.0f msgs/s  %7.2f MB/s\n", float64(r)/secs, float64(r)*float64(c.size)/secs/1e6)
	}
	printLatency(out, "send latency", st.lat)
	printLatency(out, "end-to-end latency", st.e2e)
}

// printLatency prints the percentiles of lat, sorting it, if it has any.
func printLatency(out io.Writer, what string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Microsecond) }
	fmt.Fprintf(out, "%s: p50 %v  p99 %v  p999 %v  max %v\n", what, q(0.5), q(0.99), q(0.999), q(1))
}
