package node

import (
	"fmt"
	"time"
)

// The node reopens its groups that failed to open or stopped (fail-stop
// after a storage failure, such as a full disk), with backoff, so that a
// group comes back by itself once its disk does, and a group that keeps
// failing costs a few attempts a minute rather than a hot loop.

const (
	// superviseEvery is how often the supervisor looks for groups due
	// for another attempt.
	superviseEvery = 100 * time.Millisecond
	// retryFirst and retryMax bound the backoff between attempts to open
	// a group: it doubles from retryFirst with each attempt in a row.
	retryFirst = 250 * time.Millisecond
	retryMax   = 15 * time.Second
	// healthyAfter is how long a reopened group must stay well before
	// its failures are forgotten and the backoff starts over.
	healthyAfter = 30 * time.Second
)

// trouble is a group that failed to open or stopped.
type trouble struct {
	err      error  // why the last attempt failed; nil while the group is open
	replicas []Peer // for a bootstrap, should the group have no state yet
	attempts int    // attempts to open in a row without healthyAfter of health
	next     time.Time
	openedAt time.Time // when the last attempt succeeded
}

func retryDelay(attempts int) time.Duration {
	d := retryFirst
	for i := 1; i < attempts && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// attempt decides whether ensureGroup may try to open group id now (g is
// the group if it is open and failed). If not, it returns why the group is
// unavailable. n.mu must not be held.
func (n *Node) attempt(id uint64, g *group, replicas []Peer) (*trouble, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.troubles[id]
	if t == nil {
		t = &trouble{}
		n.troubles[id] = t
	}
	if replicas != nil {
		t.replicas = replicas
	}
	if g != nil && t.err == nil {
		t.err = g.failure()
	}
	now := time.Now()
	if now.Before(t.next) {
		if t.err == nil {
			return nil, fmt.Errorf("%w: group %d is waiting to be reopened", ErrGroupFailed, id)
		}
		return nil, t.err
	}
	t.attempts++
	t.next = now.Add(retryDelay(t.attempts))
	return t, nil
}

// openFailed records that opening group id failed. It logs at ERROR when
// the reason changes, not at every attempt. n.mu must be held.
func (n *Node) openFailed(id uint64, t *trouble, err error) {
	if t.err == nil || t.err.Error() != err.Error() {
		n.log.Error("GROUP NOT OPEN: this replica does not serve the group; the node keeps trying",
			"group", id, "err", err, "attempt", t.attempts, "next_in", time.Until(t.next).Round(time.Millisecond))
	}
	t.err = err
	n.troubles[id] = t
}

// opened records that group id opened. A first open that worked leaves no
// trace. n.mu must be held.
func (n *Node) opened(id uint64, t *trouble) {
	if t.err == nil && t.attempts <= 1 {
		delete(n.troubles, id)
		return
	}
	if t.err != nil {
		n.log.Info("group open again", "group", id, "attempts", t.attempts)
	}
	t.err = nil
	t.openedAt = time.Now()
}

// OpenFailures returns, for each group whose last attempt to open failed,
// why; the node keeps trying to open them. A group that is open but
// stopped after a storage failure is not among them: Group reports it
// (GroupStatus.Err).
func (n *Node) OpenFailures() map[uint64]error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make(map[uint64]error)
	for id, t := range n.troubles {
		if t.err != nil && n.groups[id] == nil {
			out[id] = t.err
		}
	}
	return out
}

// superviseGroups reopens the groups whose backoff has passed, until the
// node closes.
func (n *Node) superviseGroups() {
	defer close(n.supervisorDone)
	tick := time.NewTicker(superviseEvery)
	defer tick.Stop()
	for {
		select {
		case <-n.stopSupervisor:
			return
		case <-tick.C:
		}
		for _, id := range n.dueGroups(time.Now()) {
			select {
			case <-n.stopSupervisor:
				return
			default:
			}
			n.openMu.Lock()
			// Failures are recorded and logged by ensureGroup.
			_ = n.ensureGroup(id, nil)
			n.openMu.Unlock()
		}
	}
}

// dueGroups returns the groups to try to open now, and forgets the
// failures of groups that have been well for healthyAfter.
func (n *Node) dueGroups(now time.Time) []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var due []uint64
	for id, g := range n.groups {
		t := n.troubles[id]
		switch {
		case g.failure() != nil:
			if t == nil || !now.Before(t.next) {
				due = append(due, id)
			}
		case t != nil && t.err == nil && now.Sub(t.openedAt) >= healthyAfter:
			delete(n.troubles, id)
		}
	}
	for id, t := range n.troubles {
		if n.groups[id] == nil && t.err != nil && !now.Before(t.next) {
			due = append(due, id)
		}
	}
	return due
}
