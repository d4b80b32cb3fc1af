package amqp

import (
	"testing"
)

// TestEngineDeferredAttach: a handler that defers the attach reply lets the
// connection go on (a session echo is answered while the reply waits),
// then completes it with its own source and properties, or refuses it; a
// peer that detaches first gets a refusal and the handler hears of it.
func TestEngineDeferredAttach(t *testing.T) {
	h := newEngHandler()
	links := make(chan *Link, 4)
	h.attachHook = func(l *Link) (LinkHandler, error) {
		l.DeferAttach()
		// A handler's goroutine may answer before Attach returns (before
		// the reply is pending): these links are answered at once.
		switch l.Name() {
		case "early":
			if !l.CompleteAttach(&Source{Address: "early-source"}, nil) {
				t.Error("CompleteAttach before Attach returned reported false")
			}
			if l.CompleteAttach(nil, nil) {
				t.Error("a second CompleteAttach before Attach returned reported true")
			}
		case "early-refused":
			l.RefuseAttach(Errorf(ErrCondNotFound, "none"))
			l.CompleteAttach(nil, nil) // too late: refused
		}
		links <- l
		return engSendLink{h}, nil
	}
	env := startEngine(t, nil, h)
	c := env.dialOpen()
	env.conn()
	c.begin(0)

	t.Run("completed", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(0, "later")
		c.send(0, a.append)
		l := <-links
		c.sessionEcho(0) // nothing else waits for the reply
		src := &Source{Address: "queue", Filter: Map{{Key: Symbol("f"), Value: Described{Descriptor: uint64(7), Value: "chosen"}}}}
		if !l.CompleteAttach(src, Map{{Key: Symbol("p"), Value: int64(42)}}) {
			t.Fatal("CompleteAttach of a pending link reported false")
		}
		f := c.expect(descAttach)
		if f.attach.Source == nil || len(f.attach.Source.Filter) != 1 {
			t.Fatalf("reply source %+v, want the handler's", f.attach.Source)
		}
		if v, _ := f.attach.Properties.Get(Symbol("p")); v != int64(42) {
			t.Fatalf("reply properties %v", f.attach.Properties)
		}
		if l.CompleteAttach(src, nil) {
			t.Fatal("a second CompleteAttach reported true")
		}
	})
	t.Run("refused", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(1, "refused")
		c.send(0, a.append)
		l := <-links
		l.RefuseAttach(Errorf(ErrCondNotFound, "none"))
		f := c.expect(descAttach)
		if f.attach.Source != nil {
			t.Fatalf("refusal carries a source: %+v", f.attach.Source)
		}
		d := c.expect(descDetach)
		engCheckCond(t, "detach", d.detach.Error, ErrCondNotFound)
		c.send(0, (&Detach{Handle: 1, Closed: true}).append)
		c.sessionEcho(0)
	})
	t.Run("completed before Attach returned", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(3, "early")
		c.send(0, a.append)
		l := <-links
		f := c.expect(descAttach)
		if f.attach.Source == nil || f.attach.Source.Address != "early-source" {
			t.Fatalf("reply source %+v, want the handler's", f.attach.Source)
		}
		if l.CompleteAttach(nil, nil) {
			t.Fatal("CompleteAttach after the early reply reported true")
		}
		l.RefuseAttach(nil) // too late: answered
		c.sessionEcho(0)    // and nothing else was sent
	})
	t.Run("refused before Attach returned", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(4, "early-refused")
		c.send(0, a.append)
		<-links
		f := c.expect(descAttach)
		if f.attach.Source != nil {
			t.Fatalf("refusal carries a source: %+v", f.attach.Source)
		}
		d := c.expect(descDetach)
		engCheckCond(t, "detach", d.detach.Error, ErrCondNotFound)
		c.send(0, (&Detach{Handle: 4, Closed: true}).append)
		c.sessionEcho(0)
	})
	t.Run("peer detached first", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(2, "gone")
		c.send(0, a.append)
		l := <-links
		c.send(0, (&Detach{Handle: 2, Closed: true}).append)
		f := c.expect(descAttach)
		if f.attach.Source != nil {
			t.Fatalf("reply to a link detached while pending carries a source: %+v", f.attach.Source)
		}
		c.expect(descDetach)
		engWaitFor(t, "the handler hears of the detach", func() bool {
			for _, d := range h.detachedLinks() {
				if d.link == "gone" {
					return true
				}
			}
			return false
		})
		if l.CompleteAttach(nil, nil) {
			t.Fatal("CompleteAttach after the peer detached reported true")
		}
		c.sessionEcho(0)
	})
}
