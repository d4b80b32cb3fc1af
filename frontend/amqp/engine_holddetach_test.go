package amqp

import (
	"testing"
)

// TestEngineHeldDetachReply: with HoldDetachReply, the engine answers the
// peer's detach only at SendDetachReply, while the connection goes on
// meanwhile; without it, at once.
func TestEngineHeldDetachReply(t *testing.T) {
	h := newEngHandler()
	links := make(chan *Link, 4)
	h.attachHook = func(l *Link) (LinkHandler, error) {
		if l.Name() == "held" {
			l.HoldDetachReply()
		}
		links <- l
		return engSendLink{h}, nil
	}
	env := startEngine(t, nil, h)
	c := env.dialOpen()
	env.conn()
	c.begin(0)

	a := engReceiverAttach(0, "held")
	c.send(0, a.append)
	c.expect(descAttach)
	l := <-links
	c.send(0, (&Detach{Handle: 0, Closed: true}).append)
	c.sessionEcho(0) // answered; the detach reply is not
	l.SendDetachReply()
	if d := c.expect(descDetach); d.detach.Handle != 0 || !d.detach.Closed {
		t.Fatalf("held reply %+v, want a closing detach of handle 0", d.detach)
	}
	l.SendDetachReply() // once only
	c.sessionEcho(0)

	b := engReceiverAttach(1, "plain")
	c.send(0, b.append)
	c.expect(descAttach)
	<-links
	c.send(0, (&Detach{Handle: 1, Closed: true}).append)
	if d := c.expect(descDetach); d.detach.Handle != 1 {
		t.Fatalf("reply %+v, want the detach of handle 1 at once", d.detach)
	}
}
