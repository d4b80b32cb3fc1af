package logbridge

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"testing"
)

func TestLevels(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	std := log.New(Writer(l), "", 0)
	std.Print("[DEBUG] memberlist: probing")
	std.Print("[WARN] memberlist: refuting a suspect message")
	std.Print("[ERR] memberlist: failed to receive")
	std.Print("no tag [at all]")
	HCLog(l, "raft").Info("entering follower state", "term", 3)
	HCLog(l, "raft").Error("failed to heartbeat")
	want := []string{
		`level=DEBUG msg="memberlist: probing"`,
		`level=WARN msg="memberlist: refuting a suspect message"`,
		`level=ERROR msg="memberlist: failed to receive"`,
		`level=INFO msg="no tag [at all]"`,
		`level=INFO msg="raft: entering follower state: term=3"`,
		`level=ERROR msg="raft: failed to heartbeat"`,
	}
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("handler level")
	}
}
