package partition

import (
	"sync"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Wake-ups of waiting receivers.
//
// A receive that finds nothing waits for its sub-queue to get a message
// (node's long-poll). Each waits on the channel of its entity partition's
// sub-queue only, so an enqueue wakes the receivers of that sub-queue and
// not every receiver of the group, each of which would look at its own
// sub-queue again for nothing.
//
// Invariant: a channel handed out by Changed is closed after the first
// Apply that made a message of its sub-queue available, or upserted or
// deleted its entity, once that Apply's changes are visible to readers;
// after a Restore; and when the machine closes. Channels exist only while someone waits.

// wakeKey names a sub-queue of an entity partition.
type wakeKey struct {
	k   ekey
	sub partitionpb.SubQueue
}

type wakeups struct {
	mu      sync.Mutex
	waiting map[wakeKey]chan struct{}
	closed  bool
}

// channel returns the channel of k, closed already if the machine is.
func (w *wakeups) channel(k wakeKey) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	ch, ok := w.waiting[k]
	if !ok {
		if w.waiting == nil {
			w.waiting = make(map[wakeKey]chan struct{})
		}
		ch = make(chan struct{})
		w.waiting[k] = ch
	}
	return ch
}

// wake closes the channels of keys.
func (w *wakeups) wake(keys map[wakeKey]bool) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range keys {
		if ch, ok := w.waiting[k]; ok {
			close(ch)
			delete(w.waiting, k)
		}
	}
}

// wakeAll closes every channel handed out.
func (w *wakeups) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeWaitingLocked()
}

// close closes every channel, now and to come.
func (w *wakeups) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.closeWaitingLocked()
}

func (w *wakeups) closeWaitingLocked() {
	for k, ch := range w.waiting {
		close(ch)
		delete(w.waiting, k)
	}
}

// wakeEntity marks every sub-queue of k for waking.
func (a *applier) wakeEntity(k ekey) {
	a.woken[wakeKey{k, partitionpb.SubQueue_SUB_QUEUE_MAIN}] = true
	a.woken[wakeKey{k, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER}] = true
}
