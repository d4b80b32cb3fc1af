package logbridge

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"
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

// TestRepeatedVoteRefusals: a vote refused to a node outside the
// configuration (a removed voter that keeps asking) is logged once a
// minute per asker; other lines, and another asker, are not held back.
func TestRepeatedVoteRefusals(t *testing.T) {
	var buf bytes.Buffer
	w := Writer(slog.New(slog.NewTextHandler(&buf, nil))).(*writer)
	refusal := `[WARN]  raft: rejecting pre-vote request since node is not in configuration: from=10.0.0.4:7000`
	start := time.Now()
	for i := range 5 {
		if w.quiet(refusal, start.Add(time.Duration(i)*time.Second)) != (i > 0) {
			t.Fatalf("refusal %d: held back %v", i, i == 0)
		}
	}
	if w.quiet(`[WARN]  raft: rejecting pre-vote request since node is not in configuration: from=10.0.0.5:7000`, start) {
		t.Fatal("another asker's refusal held back")
	}
	for range 2 {
		if w.quiet(`[WARN]  raft: failed to contact: id=n2`, start) {
			t.Fatal("another warning held back")
		}
	}
	if w.quiet(refusal, start.Add(repeatEvery)) {
		t.Fatal("the refusal held back a minute later")
	}
	fresh := Writer(slog.New(slog.NewTextHandler(&buf, nil)))
	fresh.Write([]byte(refusal + "\n" + refusal + "\n"))
	if n := strings.Count(buf.String(), "not in configuration"); n != 1 {
		t.Fatalf("the refusal written twice in a row logged %d times, want once", n)
	}
}
