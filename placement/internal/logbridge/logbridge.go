// Package logbridge turns the line loggers of hashicorp/raft (hclog) and
// memberlist (log.Logger) into slog records, keeping their levels.
package logbridge

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Writer returns an io.Writer that logs each line written to it through l
// at the level named by the line's "[LEVEL]" tag (Info when it has none).
func Writer(l *slog.Logger) io.Writer { return writer{l} }

type writer struct{ l *slog.Logger }

func (w writer) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		w.line(string(bytes.TrimSpace(line)))
	}
	return len(p), nil
}

func (w writer) line(s string) {
	if s == "" {
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
