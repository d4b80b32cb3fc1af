package amqptest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

// These tests drive the engine with Apache Qpid Proton, through its Python
// binding (Debian package python3-qpid-proton): a second client, written
// independently of go-amqp, with its own reading of the spec. Each subtest
// runs one scenario of testdata/proton_client.py against a fresh broker and
// checks the broker's state once the script has exited. PN_TRACE_FRM=1 in
// the environment makes proton print every frame.

// protonPython is the interpreter the Debian package installs proton for;
// a python3 found on PATH (pyenv, venv) usually lacks it.
const protonPython = "/usr/bin/python3"

var protonCheck = sync.OnceValue(func() error {
	cmd := exec.Command(protonPython, "-c", "import proton")
	cmd.Env = protonEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		if out = bytes.TrimSpace(out); len(out) > 0 {
			return fmt.Errorf("%v: %s", err, out)
		}
		return err
	}
	return nil
})

// requireProton skips the test when proton is missing, loudly, and fails it
// in CI, where a skip would silently hide the missing coverage.
func requireProton(t *testing.T) {
	t.Helper()
	err := protonCheck()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("python3-qpid-proton is not installed for %s (%v): CI must install python3-qpid-proton (apt-get install python3-qpid-proton) so that the proton interop tests run", protonPython, err)
	}
	msg := fmt.Sprintf("SKIP: python3-qpid-proton is not installed for %s (apt-get install python3-qpid-proton); the proton interop tests did not run (%v)", protonPython, err)
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
}

// protonEnv is the environment for the script: ours, minus what would point
// the system interpreter at another Python's libraries.
func protonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PYTHONPATH=") || strings.HasPrefix(kv, "PYTHONHOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
}

// runProton runs one scenario against the broker at addr and fails the test
// with the script's output if it does not succeed.
func runProton(t *testing.T, addr, scenario string) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "proton_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, protonPython, script, "--url", "amqp://"+addr, "--scenario", scenario, "--timeout", "20")
	cmd.Env = protonEnv()
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("proton scenario %s: killed after %v:\n%s", scenario, time.Since(start).Round(time.Millisecond), out.Bytes())
	}
	if err != nil {
		t.Fatalf("proton scenario %s: %v:\n%s", scenario, err, out.Bytes())
	}
	t.Logf("proton scenario %s passed in %v:\n%s", scenario, time.Since(start).Round(time.Millisecond), bytes.TrimSpace(out.Bytes()))
}

// protonWaitLen waits up to 10s for the queue at address to hold want
// messages: the server may still be tearing a connection down (and
// requeuing what it left unsettled) when the script has seen the close.
// The scenarios detach their receivers before closing, so a message left
// unaccepted is back in its queue by the time the script exits and a check
// for 0 cannot pass early.
func protonWaitLen(t *testing.T, b *amqptest.Broker, address string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := b.Len(address)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %q holds %d messages, want %d", address, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// protonValueTrue is a message whose only section is amqp-value true.
var protonValueTrue = []byte{0x00, 0x53, 0x77, 0x41}

// protonValueX is a message whose only section is amqp-value "x".
var protonValueX = []byte{0x00, 0x53, 0x77, 0xa1, 0x01, 'x'}

func TestProton(t *testing.T) {
	requireProton(t)
	refuseNope := func(address string) error {
		if address == "nope" {
			return amqp.Errorf(amqp.ErrCondNotFound, "no entity named %s", address)
		}
		return nil
	}
	tests := []struct {
		name  string
		srv   func() *amqp.Server
		setup func(b *amqptest.Broker)
		check func(t *testing.T, b *amqptest.Broker)
		runs  int  // times to run the script; default 1
		slow  bool // skipped with -short
	}{
		{
			name:  "sasl-anonymous",
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-q1", 0) },
		},
		{
			name:  "no-sasl",
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-nosasl", 0) },
		},
		{
			name:  "presettled",
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-rd", 0) },
		},
		{
			name:  "release",
			setup: func(b *amqptest.Broker) { b.Put("proton-rel", protonValueX) },
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-rel", 0) },
		},
		{
			name:  "large",
			srv:   func() *amqp.Server { return &amqp.Server{MaxMessageSize: 16 << 20} },
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-big", 0) },
		},
		{
			name: "many-links",
			check: func(t *testing.T, b *amqptest.Broker) {
				for si := range 4 {
					for li := range 4 {
						protonWaitLen(t, b, fmt.Sprintf("proton-s%d-l%d", si, li), 0)
					}
				}
			},
		},
		{
			name: "refused",
			srv:  func() *amqp.Server { return &amqp.Server{Handler: &amqptest.Broker{Refuse: refuseNope}} },
			check: func(t *testing.T, b *amqptest.Broker) {
				protonWaitLen(t, b, "yes", 1)
				protonWaitLen(t, b, "nope", 0)
			},
		},
		{
			name:  "drain",
			setup: func(b *amqptest.Broker) { b.Put("proton-d", protonValueTrue) },
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-d", 0) },
		},
		{
			name:  "pipelined",
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-pipe", 5000) },
		},
		{
			// Each run takes the message and drops the connection with it
			// unsettled; the message must come back every time.
			name:  "abrupt",
			setup: func(b *amqptest.Broker) { b.Put("proton-abrupt", protonValueTrue) },
			check: func(t *testing.T, b *amqptest.Broker) { protonWaitLen(t, b, "proton-abrupt", 1) },
			runs:  3,
		},
		{
			name: "idle",
			srv:  func() *amqp.Server { return &amqp.Server{IdleTimeout: 1500 * time.Millisecond} },
			check: func(t *testing.T, b *amqptest.Broker) {
				protonWaitLen(t, b, "proton-ka", 1)
			},
			slow: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow && testing.Short() {
				t.Skip("waits several seconds")
			}
			t.Parallel()
			var srv *amqp.Server
			if tc.srv != nil {
				srv = tc.srv()
			}
			b, addr := amqptest.Start(t, srv)
			if tc.setup != nil {
				tc.setup(b)
			}
			for i := range max(tc.runs, 1) {
				if i > 0 {
					// Each run starts from the state the previous one
					// should have left.
					tc.check(t, b)
				}
				runProton(t, addr, tc.name)
			}
			tc.check(t, b)
		})
	}
}
