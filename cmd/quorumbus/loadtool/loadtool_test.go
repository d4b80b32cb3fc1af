package loadtool

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

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
		url: "amqp://" + addr, addresses: []string{"bench"}, mode: "both", conns: 1, links: 2,
		size: 100, count: 2000, window: 16, credit: 50, receiveMode: "peeklock",
		serverPid: os.Getpid(), // the broker runs in this process
		coalesce:  true,
	}
	if _, err := runBench(ctx, c, &out); err != nil {
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
	c := benchConfig{url: "amqp://" + addr, addresses: []string{"q"}, mode: "send", conns: 1, links: 1, size: 10, count: 200, window: 8, credit: 10}
	if _, err := runBench(context.Background(), c, &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "end-to-end") {
		t.Errorf("send-only run reports end-to-end latency:\n%s", out.String())
	}
	if n := b.Len("q"); n != 200 {
		t.Errorf("%d messages in the queue, want 200", n)
	}
}

// TestRunSeveralAddresses: Run with the command's flags sends a share of
// -count to each address of -queue, every message with the -property
// values (a long where the value is an integer) and the -subject, then
// receives from all the addresses together until it has -count.
func TestRunSeveralAddresses(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	url := "-url=amqp://" + addr
	f, err := Run(ctx, []string{url, "-key-name=", "-queue", "a, b", "-mode", "send", "-count", "101", "-links", "2", "-window", "4",
		"-property", "region=emea", "-property", "priority=3", "-subject", "Order-1"}, &out)
	if err != nil || f.Sent != 101 || f.SendRate() <= 0 {
		t.Fatalf("send: %+v, %v\n%s", f, err, out.String())
	}
	if na, nb := b.Len("a"), b.Len("b"); na+nb != 101 || na < 50 || nb < 50 {
		t.Fatalf("a holds %d, b %d; want 101 shared", na, nb)
	}
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	rcv.Close(ctx)
	if m.ApplicationProperties["region"] != "emea" || m.ApplicationProperties["priority"] != int64(3) ||
		m.Properties == nil || m.Properties.Subject == nil || *m.Properties.Subject != "Order-1" {
		t.Fatalf("received properties %v, %+v", m.ApplicationProperties, m.Properties)
	}
	f, err = Run(ctx, []string{url, "-key-name=", "-queue", "a,b", "-mode", "receive", "-count", "100", "-credit", "10"}, &out)
	if err != nil || f.Received != 100 {
		t.Fatalf("receive: %+v, %v\n%s", f, err, out.String())
	}
	if na, nb := b.Len("a"), b.Len("b"); na+nb != 0 {
		t.Fatalf("a holds %d, b %d after the receive", na, nb)
	}
	for _, bad := range [][]string{{"-queue", ","}, {"-property", "novalue"}, {"-gogc", "100"}, {"-count", "0"}} {
		if _, err := Run(ctx, append([]string{url}, bad...), io.Discard); err == nil {
			t.Errorf("Run %v: no error", bad)
		}
	}
}
