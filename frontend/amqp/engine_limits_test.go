package amqp

// Engine tests of the server's resource limits: accept errors that pass,
// the connection limit, and the budgets of bytes held in unfinished
// messages.

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first accepts with an error, then accepts.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// TestServeRetriesTemporaryAcceptErrors: running out of descriptors does
// not end Serve; the next connection is served.
func TestServeRetriesTemporaryAcceptErrors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ECONNABORTED} {
		t.Run(errno.Error(), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			fl := &flakyListener{Listener: ln, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", errno)}}
			fl.fails.Store(5)
			env := startEngineOn(t, &Server{}, nil, fl)
			c := env.dialOpen()
			c.begin(0)
			if got := env.srv.Stats().AcceptRetries; got != 5 {
				t.Errorf("AcceptRetries = %d, want 5", got)
			}
			if !env.srv.Listening() {
				t.Error("Listening() = false while Serve accepts")
			}
		})
	}
}

// TestServeReturnsWhenListenerDies: a listener closed by someone else
// ends Serve with an error that is not ErrServerClosed, and the server
// says it no longer listens.
func TestServeReturnsWhenListenerDies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Handler: newEngHandler(), Logger: engLogger()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	engWaitFor(t, "Serve to start", srv.Listening)
	ln.Close()
	select {
	case err := <-served:
		if err == nil || errors.Is(err, ErrServerClosed) || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve returned %v, want the listener's error", err)
		}
	case <-time.After(engTimeout):
		t.Fatal("Serve did not return after its listener was closed")
	}
	if srv.Listening() {
		t.Error("Listening() = true after Serve returned")
	}
	ctx, cancel := context.WithTimeout(context.Background(), engTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownEndsAcceptBackoff: Shutdown while Serve waits to retry an
// accept error returns ErrServerClosed from Serve.
func TestShutdownEndsAcceptBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln, err: os.NewSyscallError("accept", syscall.EMFILE)}
	fl.fails.Store(1 << 30)
	srv := &Server{Handler: newEngHandler(), Logger: engLogger()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(fl) }()
	engWaitFor(t, "accept retries", func() bool { return srv.Stats().AcceptRetries > 2 })
	ctx, cancel := context.WithTimeout(context.Background(), engTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve returned %v, want ErrServerClosed", err)
		}
	case <-time.After(engTimeout):
		t.Fatal("Serve did not return after Shutdown")
	}
}

// TestEngineConnectionLimit: past MaxConnections a connection gets our
// open and a close with amqp:resource-limit-exceeded, the handler never
// sees it, and once a connection ends a new one is served again.
func TestEngineConnectionLimit(t *testing.T) {
	env := startEngine(t, &Server{MaxConnections: 2}, nil)
	a := env.dialOpen()
	env.conn()
	env.dialOpen()
	env.conn()

	open := engClientOpen()
	c := env.dial()
	c.write(append(protoHeaderAMQP[:], engFrameBytes(frameTypeAMQP, 0, open.append)...))
	c.expectHeader(protoHeaderAMQP)
	c.expect(descOpen)
	e := c.expectClose(ErrCondResourceLimitExceeded)
	if !strings.Contains(e.Description, "connection limit") {
		t.Errorf("close description %q does not name the connection limit", e.Description)
	}
	env.noOpenConn()

	// A peer that starts with SASL is refused the same way, after SASL.
	c = env.dial()
	c.write(protoHeaderSASL[:])
	c.expectHeader(protoHeaderSASL)
	c.expect(descSASLMechanisms)
	c.write(engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append))
	if f := c.expect(descSASLOutcome); f.outcome.Code != saslOK {
		t.Fatalf("sasl outcome %d", f.outcome.Code)
	}
	c.write(append(protoHeaderAMQP[:], engFrameBytes(frameTypeAMQP, 0, open.append)...))
	c.expectHeader(protoHeaderAMQP)
	c.expect(descOpen)
	c.expectClose(ErrCondResourceLimitExceeded)

	if got := env.srv.Stats().RefusedConns; got != 2 {
		t.Errorf("RefusedConns = %d, want 2", got)
	}

	a.send(0, engCloseBody)
	a.expectClose("")
	engWaitFor(t, "the closed connection to be gone", func() bool { return env.srv.Stats().Conns == 1 })
	env.dialOpen().begin(0)
	env.conn()
}
