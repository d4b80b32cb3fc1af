// Package logbridge turns the line loggers of hashicorp/raft (hclog) and
// memberlist (log.Logger) into slog records, keeping their levels.
package logbridge

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Writer returns an io.Writer that logs each line written to it through l
// at the level named by the line's "[LEVEL]" tag (Info when it has none).
// A vote refused to a node outside the configuration is logged once a
// minute per line: a removed meta voter asks every election timeout until
// it is restarted, and the members would repeat the same warning forever.
func Writer(l *slog.Logger) io.Writer { return &writer{l: l, seen: map[string]time.Time{}} }

type writer struct {
	l *slog.Logger

	mu   sync.Mutex
	seen map[string]time.Time // repeated lines, when last logged
}

// repeatEvery is how often a repeated line is logged again.
const repeatEvery = time.Minute

// repeats are the lines logged at most once per repeatEvery.
var repeats = []string{
	"rejecting pre-vote request since node is not in configuration",
	"rejecting vote request since node is not in configuration",
}

// quiet reports whether line s was logged less than repeatEvery ago.
func (w *writer) quiet(s string, now time.Time) bool {
	found := false
	for _, r := range repeats {
		if strings.Contains(s, r) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.seen[s]; ok && now.Sub(last) < repeatEvery {
		return true
	}
	if len(w.seen) >= 1024 {
		clear(w.seen) // bounded: at worst a line comes once more
	}
	w.seen[s] = now
	return false
}

func (w *writer) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		w.line(string(bytes.TrimSpace(line)))
	}
	return len(p), nil
}

func (w *writer) line(s string) {
	if s == "" || w.quiet(s, time.Now()) {
		return
	}
	level := slog.LevelInfo
	if open := strings.IndexByte(s, '['); open >= 0 {
		if end := strings.IndexByte(s[open:], ']'); end > 0 {
			tag := s[open+1 : open+end]
			known := true
			switch tag {
			case "TRACE", "DEBUG":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			case "WARN":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			default:
				known = false
			}
			if known {
				s = strings.TrimSpace(s[open+end+1:])
			}
		}
	}
	w.l.Log(context.Background(), level, s)
}

// HCLog returns an hclog.Logger for hashicorp/raft that writes through l,
// at Debug when l logs Debug and at Info otherwise.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	level := hclog.Info
	if l.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:        name,
		Level:       level,
		Output:      Writer(l),
		DisableTime: true,
	})
}
