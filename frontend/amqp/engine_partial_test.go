package amqp

// Engine tests of the budgets of bytes held in unfinished (multi-frame)
// incoming messages.

import (
	"bytes"
	"strings"
	"testing"
)

// partialEnv is a connection with two links on which the client sends,
// against a server with the given partial-bytes budgets.
func partialEnv(t *testing.T, srv *Server) (*engEnv, *engConn) {
	t.Helper()
	env := startEngine(t, srv, nil)
	c := env.dialOpen()
	c.begin(0)
	c.attachSender(0, 0, "a", true)
	c.attachSender(0, 1, "b", true)
	return env, c
}

// sendPartial sends the first frames of a message on handle: frames of
// chunk bytes, all with more set.
func sendPartial(c *engConn, handle, id uint32, frames, chunk int) {
	c.t.Helper()
	first := engMsgTransfer(handle, id)
	first.More = true
	c.transfer(0, first, bytes.Repeat([]byte{'x'}, chunk))
	for range frames - 1 {
		c.transfer(0, Transfer{Handle: handle, More: true}, bytes.Repeat([]byte{'x'}, chunk))
	}
}

// TestEnginePartialBudgetPerConnection: a transfer that would take the
// connection's unfinished messages past its budget detaches its link with
// amqp:resource-limit-exceeded and frees what the link held; the other
// link's message completes, and then nothing is held.
func TestEnginePartialBudgetPerConnection(t *testing.T) {
	const chunk = 50_000
	env, c := partialEnv(t, &Server{MaxConnPartialBytes: 300_000, MaxMessageSize: 10 << 20})
	sendPartial(c, 0, 0, 2, chunk)
	sendPartial(c, 1, 1, 8, chunk)
	f := c.expect(descDetach)
	if f.detach.Handle != 1 || !f.detach.Closed {
		t.Fatalf("got %v, want link b detached", f)
	}
	engCheckCond(t, "detach", f.detach.Error, ErrCondResourceLimitExceeded)
	if !strings.Contains(f.detach.Error.Description, "connection") {
		t.Errorf("detach description %q does not say which budget", f.detach.Error.Description)
	}
	st := env.srv.Stats()
	if st.PartialRefusals != 1 {
		t.Errorf("PartialRefusals = %d, want 1", st.PartialRefusals)
	}
	if st.PartialBytes < 2*chunk || st.PartialBytes > 300_000 {
		t.Errorf("PartialBytes = %d with link a holding %d bytes, want that much and within the budget", st.PartialBytes, 2*chunk)
	}
	// Link a finishes its message; it fits even though b was refused.
	c.transfer(0, Transfer{Handle: 0}, []byte("end"))
	c.readDispositions(1)
	msgs := env.h.messages()
	if len(msgs) != 1 || msgs[0].link != "a" || len(msgs[0].payload) != 2*chunk+3 {
		t.Fatalf("handler got %d messages, want link a's of %d bytes", len(msgs), 2*chunk+3)
	}
	// The handler's settlement can reach us before the engine, back from
	// the handler, gives the buffer back: wait for it.
	engWaitFor(t, "PartialBytes to return to 0 after the message completed and the other link was refused", func() bool {
		return env.srv.Stats().PartialBytes == 0
	})
	// The connection still works, and the budget is free again.
	c.send(0, (&Detach{Handle: 1, Closed: true}).append)
	c.attachSender(0, 1, "b2", true)
	sendPartial(c, 1, 2, 5, chunk)
	c.transfer(0, Transfer{Handle: 1}, []byte("end"))
	c.readDispositions(1)
}

// TestEnginePartialBudgetPerServer: connections each within their own
// budget are refused once together they pass the server's.
func TestEnginePartialBudgetPerServer(t *testing.T) {
	const chunk = 50_000
	srv := &Server{MaxPartialBytes: 250_000, MaxMessageSize: 10 << 20}
	env, c1 := partialEnv(t, srv)
	sendPartial(c1, 0, 0, 3, chunk) // 150,000 bytes in a buffer of at most twice that
	c1.sessionEcho(0)
	c2 := env.dialOpen()
	c2.begin(0)
	c2.attachSender(0, 0, "c", true)
	sendPartial(c2, 0, 0, 4, chunk)
	f := c2.expect(descDetach)
	engCheckCond(t, "detach", f.detach.Error, ErrCondResourceLimitExceeded)
	if !strings.Contains(f.detach.Error.Description, "server") {
		t.Errorf("detach description %q does not say which budget", f.detach.Error.Description)
	}
	if got := env.srv.Stats().PartialRefusals; got != 1 {
		t.Errorf("PartialRefusals = %d, want 1", got)
	}
}

// TestEnginePartialBytesReleased: what an unfinished message holds is given
// back when it is aborted, when its link detaches, when its session ends
// and when its connection closes.
func TestEnginePartialBytesReleased(t *testing.T) {
	const chunk = 40_000
	env, c := partialEnv(t, &Server{})
	held := func() int64 { return env.srv.Stats().PartialBytes }
	freed := func(what string) {
		t.Helper()
		engWaitFor(t, "PartialBytes to return to 0 after "+what, func() bool { return held() == 0 })
	}
	started := func() {
		t.Helper()
		c.sessionEcho(0)
		if held() < 3*chunk {
			t.Fatalf("PartialBytes = %d with a message of %d bytes unfinished", held(), 3*chunk)
		}
	}

	sendPartial(c, 0, 0, 3, chunk)
	started()
	c.transfer(0, Transfer{Handle: 0, Aborted: true}, nil)
	freed("an abort")

	sendPartial(c, 0, 1, 3, chunk)
	started()
	c.send(0, (&Detach{Handle: 0, Closed: true}).append)
	c.expect(descDetach)
	freed("the peer detached the link")

	sendPartial(c, 1, 2, 3, chunk)
	started()
	c.send(0, engEndBody)
	c.expectEnd(0, "")
	freed("the session ended")

	c.begin(1)
	c.attachSender(1, 0, "d", true)
	first := engMsgTransfer(0, 0)
	first.More = true
	c.transfer(1, first, bytes.Repeat([]byte{'x'}, chunk))
	c.sessionEcho(1)
	if held() == 0 {
		t.Fatal("PartialBytes = 0 with a message unfinished")
	}
	c.nc.Close()
	freed("the connection closed")
}
