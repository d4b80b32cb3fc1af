package loadtool

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

// TestBenchBoth runs the load tool in both directions against the engine's
// example broker: every message sent is received and completed, and the
// report has the rates, both latencies and the CPU line.
func TestBenchBoth(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	c := benchConfig{
		url: "amqp://" + addr, address: "bench", mode: "both", conns: 1, links: 2,
		size: 100, count: 2000, window: 16, credit: 50, receiveMode: "peeklock",
		serverPid: os.Getpid(), // the broker runs in this process
		coalesce:  true,
	}
	if err := runBench(ctx, c, &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, want := range []string{
		"errors 0\n", "send:", "receive:", "send latency: p50", "end-to-end latency: p50",
		"cpu: load tool", " µs/msg", "server ", "cores busy",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if n := b.Len("bench"); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// TestBenchSendOnlyHasNoEndToEnd: without receivers in the run there is no
// end-to-end latency to report.
func TestBenchSendOnlyHasNoEndToEnd(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	var out bytes.Buffer
	c := benchConfig{url: "amqp://" + addr, address: "q", mode: "send", conns: 1, links: 1, size: 10, count: 200, window: 8, credit: 10}
	if err := runBench(context.Background(), c, &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "end-to-end") {
		t.Errorf("send-only run reports end-to-end latency:\n%s", out.String())
	}
	if n := b.Len("q"); n != 200 {
		t.Errorf("%d messages in the queue, want 200", n)
	}
}
