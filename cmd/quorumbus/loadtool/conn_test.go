package loadtool

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestCoalescingConnKeepsOrder: whatever the rounds of the flusher, the
// peer reads every byte written, in the order written.
func TestCoalescingConnKeepsOrder(t *testing.T) {
	client, server := net.Pipe()
	c := newCoalescingConn(client)
	var want bytes.Buffer
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(server)
		got <- b
	}()
	for i := range 5000 {
		frame := bytes.Repeat([]byte{byte(i)}, 1+i%300)
		want.Write(frame)
		if n, err := c.Write(frame); err != nil || n != len(frame) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	// Close drops what is pending, so wait until the reader has it all.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		idle := len(c.pending) == 0 && !c.flushing
		c.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pending bytes never written")
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("peer read %d bytes, want the %d written", len(b), want.Len())
	}
}

// TestCoalescingConnReportsWriteError: once a write fails, later writes
// return the error instead of queueing bytes that will never leave.
func TestCoalescingConnReportsWriteError(t *testing.T) {
	client, server := net.Pipe()
	server.Close()
	c := newCoalescingConn(client)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Write([]byte("frame"))
		if errors.Is(err, io.ErrClosedPipe) {
			return
		}
		if err != nil {
			t.Fatalf("write: %v, want %v", err, io.ErrClosedPipe)
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed peer never failed")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoalescingConnWriteAfterClose fails at once.
func TestCoalescingConnWriteAfterClose(t *testing.T) {
	client, _ := net.Pipe()
	c := newCoalescingConn(client)
	c.Close()
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want %v", err, net.ErrClosed)
	}
}
