// Package adminhttp is the admin HTTP listener every quorumbus process
// runs: liveness at /healthz, readiness at /readyz, Go's profiles at
// /debug/pprof/ when asked for, and whatever handlers the process adds
// (metrics). It knows nothing of the broker: a process hands it named
// checks. docs/operations.md says what each probe means to an operator.
package adminhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Check is one condition of readiness. Func returns nil when it holds,
// else an error that says what is missing. It must only read state the
// process keeps (no network call): /readyz runs every check on each
// request, and gives up on one after CheckTimeout.
type Check struct {
	Name string
	Func func() error
}

// A Probe exercises what a wedged process would be stuck in: a lock its
// main loops take, a call into a component's loop. The watchdog runs the
// probes one after another; one that does not return makes /healthz fail.
type Probe struct {
	Name string
	Run  func()
}

// Config configures the admin listener. The zero value of every optional
// field is a working default.
type Config struct {
	// Addr is the listen address; empty: no listener (Start does nothing).
	Addr string
	// Pprof serves Go's profiles at /debug/pprof/. Off by default: a
	// profile costs CPU and shows the process's internals.
	Pprof bool

	// Probes are what the watchdog runs for liveness.
	Probes []Probe
	// Handlers are served as they are, by pattern (http.ServeMux).
	Handlers map[string]http.Handler
	// API serves what the listener's own routes do not, and every request
	// that carries an api-version query parameter (the Service Bus
	// management API's, gateway.Gateway), so that an entity named like a
	// route (healthz, metrics) is still reachable. nil: none.
	API http.Handler
	// TLS, when set, makes the listener serve HTTPS and plain HTTP on the
	// same port, told apart by the first byte (tls.go).
	TLS *tls.Config
	// TLSOnly, with TLS, makes the listener serve HTTPS only (the cluster
	// plane's TLS flags set it: profiles and metrics are then never sent
	// in clear text).
	TLSOnly bool
	// TLSAddr, with TLS, is a second listen address that serves HTTPS
	// only (a port of its own for HTTPS, as a Kubernetes Service names
	// one); empty: none.
	TLSAddr string

	// ProbeInterval is the pause between two rounds of probes. Default 5 s.
	ProbeInterval time.Duration
	// StuckAfter is how long a probe may run, or a round of probes may be
	// missing, before /healthz fails. Default 60 s: far longer than a busy
	// process takes for a lock, so liveness never flaps under load.
	StuckAfter time.Duration
	// CheckTimeout bounds one readiness check. Default 2 s.
	CheckTimeout time.Duration

	Logger *slog.Logger
}

// RegisterFlags adds the listener's flags to fs, with defaultAddr as
// -http-addr's default. Every subcommand that runs a process calls it, so
// the flags are the same everywhere.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&c.Addr, "http-addr", defaultAddr, "admin HTTP listener: /healthz (liveness), /readyz (readiness), /metrics (Prometheus), /debug/pprof/ with -pprof; on dev and gateway the management API too (empty: none)")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go's profiles at /debug/pprof/ on the admin HTTP listener")
}

func (c Config) withDefaults() Config {
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 5 * time.Second
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = 60 * time.Second
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Server is the admin listener of one process.
type Server struct {
	cfg  Config
	mux  *http.ServeMux
	http *http.Server
	dog  *watchdog

	mu     sync.Mutex
	checks []*check
	ln     net.Listener
	tlsLn  net.Listener // TLSAddr's
	cancel context.CancelFunc
}

type check struct {
	Check
	running atomic.Bool // an earlier run has not returned yet
}

// writeTimeout bounds writing one response, so that a client that stops
// reading cannot hold a connection. A CPU profile takes its whole duration
// (30 s by default) to write, and pprof refuses a duration longer than
// the timeout. The API's calls wait for Raft commits (a create waits for
// its partitions too) and bound themselves; cutting one short here would
// make the client retry a change that was made (a create then answers
// 409).
func (c Config) writeTimeout() time.Duration {
	if c.Pprof || c.API != nil {
		return 2 * time.Minute
	}
	return 10 * time.Second
}

// New returns a server; Start listens.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, mux: http.NewServeMux(), dog: newWatchdog(cfg)}
	s.mux.HandleFunc("/healthz", s.healthz)
	s.mux.HandleFunc("/readyz", s.readyz)
	if cfg.Pprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	for pattern, h := range cfg.Handlers {
		s.mux.Handle(pattern, h)
	}
	var handler http.Handler = s.mux
	if cfg.API != nil {
		s.mux.Handle("/", cfg.API)
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("api-version") {
				cfg.API.ServeHTTP(w, r)
				return
			}
			s.mux.ServeHTTP(w, r)
		})
	}
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      cfg.writeTimeout(),
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// AddChecks adds readiness checks; a process adds them as its parts start.
func (s *Server) AddChecks(checks ...Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range checks {
		s.checks = append(s.checks, &check{Check: c})
	}
}

// Handler serves the listener's routes, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Start listens on Config.Addr, serves in the background and starts the
// watchdog. With an empty Addr it only starts the watchdog.
func (s *Server) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	go s.dog.run(ctx)
	if s.cfg.Addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		cancel()
		return fmt.Errorf("admin HTTP listener: %w", err)
	}
	switch {
	case s.cfg.TLS != nil && s.cfg.TLSOnly:
		ln = tls.NewListener(ln, s.cfg.TLS)
	case s.cfg.TLS != nil:
		ln = newSniffListener(ln, s.cfg.TLS)
	}
	var tlsLn net.Listener
	if s.cfg.TLSAddr != "" && s.cfg.TLS != nil {
		if tlsLn, err = net.Listen("tcp", s.cfg.TLSAddr); err != nil {
			ln.Close()
			cancel()
			return fmt.Errorf("admin HTTPS listener: %w", err)
		}
		tlsLn = tls.NewListener(tlsLn, s.cfg.TLS)
		go func() {
			if err := s.http.Serve(tlsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error("admin HTTPS listener stopped", "addr", tlsLn.Addr(), "err", err)
			}
		}()
	}
	s.mu.Lock()
	s.ln, s.tlsLn = ln, tlsLn
	s.mu.Unlock()
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin HTTP listener stopped", "addr", ln.Addr(), "err", err)
		}
	}()
	return nil
}

// Addr is the address the listener is bound to; "" before Start or
// without a listener.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// TLSAddr is the address of the HTTPS-only listener; "" without one.
func (s *Server) TLSAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// Shutdown stops the watchdog and the listener, waiting for requests in
// flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	cancel, ln := s.cancel, s.ln
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if ln == nil {
		return nil
	}
	return s.http.Shutdown(ctx)
}

// Ready runs every check and returns one line per check ("ok name" or
// "FAIL name: why"), and whether all passed.
func (s *Server) Ready() (lines []string, ok bool) {
	s.mu.Lock()
	checks := append([]*check(nil), s.checks...)
	s.mu.Unlock()
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.run(c)
		}()
	}
	wg.Wait()
	ok = true
	for i, c := range checks {
		if errs[i] != nil {
			ok = false
			lines = append(lines, fmt.Sprintf("FAIL %s: %v", c.Name, oneLine(errs[i])))
		} else {
			lines = append(lines, "ok   "+c.Name)
		}
	}
	return lines, ok
}

// run runs one check with CheckTimeout. A check that does not return is
// left to finish on its own; until it does, later runs fail at once
// instead of piling up goroutines behind it.
func (s *Server) run(c *check) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("an earlier run of this check has not returned")
	}
	done := make(chan error, 1)
	go func() {
		err := c.Func()
		c.running.Store(false)
		done <- err
	}()
	timer := time.NewTimer(s.cfg.CheckTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("no answer within %v", s.cfg.CheckTimeout)
	}
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	lines, ok := s.Ready()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if ok {
		lines = append(lines, "ready")
	} else {
		lines = append(lines, "not ready")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.dog.healthy(); err != nil {
		http.Error(w, "unhealthy: "+oneLine(err), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Healthy reports what /healthz reports: nil, or why the process is
// wedged.
func (s *Server) Healthy() error { return s.dog.healthy() }

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// watchdog runs the probes in a goroutine of its own and remembers what it
// is running since when, and when it last completed a round. A probe
// stuck past StuckAfter, or no round for StuckAfter (the goroutine itself
// starved, the runtime wedged), makes the process unhealthy. /healthz
// only reads what the watchdog recorded, so it answers even then.
type watchdog struct {
	probes             []Probe
	interval, stuckFor time.Duration

	current   atomic.Pointer[running]
	lastRound atomic.Int64 // unix nanoseconds
}

type running struct {
	name  string
	since time.Time
}

func newWatchdog(cfg Config) *watchdog {
	w := &watchdog{probes: cfg.Probes, interval: cfg.ProbeInterval, stuckFor: cfg.StuckAfter}
	w.lastRound.Store(time.Now().UnixNano())
	return w
}

func (w *watchdog) run(ctx context.Context) {
	w.lastRound.Store(time.Now().UnixNano())
	for {
		for _, p := range w.probes {
			w.current.Store(&running{name: p.Name, since: time.Now()})
			p.Run()
		}
		w.current.Store(nil)
		w.lastRound.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.interval):
		}
	}
}

func (w *watchdog) healthy() error {
	if r := w.current.Load(); r != nil {
		if d := time.Since(r.since); d > w.stuckFor {
			return fmt.Errorf("probe %q has not returned for %v", r.name, d.Round(time.Second))
		}
		return nil
	}
	if d := time.Since(time.Unix(0, w.lastRound.Load())); d > w.stuckFor+w.interval {
		return fmt.Errorf("the watchdog has not completed a round for %v", d.Round(time.Second))
	}
	return nil
}
