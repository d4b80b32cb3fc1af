package adminhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// eventually polls cond until it holds, failing the test after a generous
// deadline; no test asserts how long anything takes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReadyzSaysWhichCheckFails(t *testing.T) {
	s := New(Config{})
	var broken atomic.Bool
	s.AddChecks(
		Check{"listener", func() error { return nil }},
		Check{"groups", func() error {
			if broken.Load() {
				return errors.New("group 2: no leader\nknown")
			}
			return nil
		}},
	)
	code, body := get(t, s.Handler(), "/readyz")
	if code != http.StatusOK || !strings.Contains(body, "ok   groups") || !strings.HasSuffix(body, "ready\n") {
		t.Fatalf("ready: %d %q", code, body)
	}
	broken.Store(true)
	code, body = get(t, s.Handler(), "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "FAIL groups: group 2: no leader; known\n") ||
		!strings.Contains(body, "ok   listener") || !strings.HasSuffix(body, "not ready\n") {
		t.Fatalf("unready: %d %q", code, body)
	}
}

// TestCheckThatHangs: a check that does not return fails once it timed
// out, and later runs fail at once while it still hangs.
func TestCheckThatHangs(t *testing.T) {
	s := New(Config{CheckTimeout: 10 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	s.AddChecks(Check{"stuck", func() error { <-release; return nil }})
	for range 2 {
		lines, ok := s.Ready()
		if ok || len(lines) != 1 || !strings.HasPrefix(lines[0], "FAIL stuck: ") {
			t.Fatalf("Ready() = %q, %v", lines, ok)
		}
	}
}

// TestHealthzCatchesAStuckProbe: a probe that stops returning (a lock a
// main loop holds forever) makes the process unhealthy; once it returns,
// healthy again.
func TestHealthzCatchesAStuckProbe(t *testing.T) {
	var wedged atomic.Bool
	release := make(chan struct{})
	s := New(Config{
		ProbeInterval: time.Millisecond,
		StuckAfter:    50 * time.Millisecond,
		Probes: []Probe{{"main loop", func() {
			if wedged.Load() {
				<-release
			}
		}}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, s.Handler(), "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d %q", code, body)
	}
	wedged.Store(true)
	eventually(t, "unhealthy", func() bool {
		code, body := get(t, s.Handler(), "/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `probe "main loop" has not returned`)
	})
	wedged.Store(false)
	close(release)
	eventually(t, "healthy again", func() bool {
		code, _ := get(t, s.Handler(), "/healthz")
		return code == http.StatusOK
	})
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	if code, _ := get(t, New(Config{}).Handler(), "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof off: %d, want 404", code)
	}
	s := New(Config{Pprof: true})
	if code, _ := get(t, s.Handler(), "/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("pprof on: %d, want 200", code)
	}
	if s.http.WriteTimeout == 0 || New(Config{}).http.WriteTimeout == 0 {
		t.Fatal("no WriteTimeout")
	}
}

func TestListener(t *testing.T) {
	s := New(Config{Addr: "127.0.0.1:0"})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	resp, err := http.Get("http://" + s.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz with no checks: %d", resp.StatusCode)
	}
}
