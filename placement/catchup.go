package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/placement/catalog"
)

// A member's catalog is only as new as what its state machine applied.
// After a (re)start Raft restores the latest snapshot at once but applies
// the log after it only when it learns the commit index, which it does
// not persist: from the leader's first AppendEntries on a follower, and
// from the first entry of its own term on a new leader. Until then the
// catalog may lack entities that exist, and an answer from it would say
// "not found" of them, which clients take as final. So a member serves
// catalog reads (GetEntity, ListEntities, WatchRoutes) only once it caught
// up, and answers UNAVAILABLE (ErrCatchingUp) before:
//
//   - a member has caught up once its state machine applied every command
//     up to the first commit index it learned after starting (catchUp), or
//     once it completed a barrier as leader. It stays caught up: what it
//     serves afterwards lags the leader no more than any follower does.
//     (A follower's commit index is capped at its own last entry, so one
//     that missed entries while it was down catches up with what it has
//     and receives the rest as any follower does; GetEntity and
//     ListEntities are answered by the leader anyway.)
//   - a leader answers reads only after a barrier of its own term
//     (leaderBarrier): a new leader commits the entries of earlier terms
//     with its first entry, and its catalog may lack changes acknowledged
//     by the previous leader until it applied them.

// catchUpWait bounds how long a read waits for this member to catch up
// before answering UNAVAILABLE, so that a client may try another member.
func (s *Service) catchUpWait() time.Duration { return 2 * s.cfg.ElectionTimeout }

// CaughtUp is closed once this member's catalog holds every change
// committed when it started (see catchUp).
func (s *Service) CaughtUp() <-chan struct{} { return s.caughtUp }

func (s *Service) markCaughtUp() {
	s.caughtOnce.Do(func() {
		close(s.caughtUp)
		s.log.Info("catalog caught up", "applied", s.applied())
	})
}

func (s *Service) applied() uint64 {
	var applied uint64
	s.fsm.Read(func(st *catalog.State) { applied = st.Applied() })
	return applied
}

// catchUp marks the member caught up once its state machine applied every
// command up to the first commit index Raft learned after the start.
// Raft's commit index starts at 0 and only a leader raises it.
func (s *Service) catchUp(r *raft.Raft) {
	defer s.wg.Done()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var target uint64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.caughtUp:
			return
		case <-tick.C:
		}
		if target == 0 {
			if target = r.CommitIndex(); target == 0 {
				continue
			}
		}
		if r.AppliedIndex() >= target && s.appliedThrough(target) {
			s.markCaughtUp()
			return
		}
	}
}

// appliedThrough reports whether the state machine applied every command
// of the log up to index. Raft's AppliedIndex counts entries handed to the
// state machine, which applies them a moment later, and entries it never
// sees (no-ops, barriers, configurations) are not recorded by the catalog:
// so look for a command above what the catalog applied.
func (s *Service) appliedThrough(index uint64) bool {
	applied := s.applied()
	for i := index; i > applied; i-- {
		var l raft.Log
		if err := s.logs.GetLog(i, &l); err != nil {
			// Below the log's first index: covered by the snapshot that
			// was restored before Raft started, so applied already.
			return errors.Is(err, raft.ErrLogNotFound)
		}
		if l.Type == raft.LogCommand {
			return false
		}
	}
	return true
}

// leaderBarrier waits until this new leader's state machine applied every
// entry before its term, then records the term as ready for reads. It
// reports false when leadership or the service ended first.
func (s *Service) leaderBarrier(ctx context.Context, r *raft.Raft) bool {
	term := r.CurrentTerm()
	for ctx.Err() == nil {
		err := s.await(ctx, r.Barrier(s.cfg.ElectionTimeout))
		if err == nil {
			if r.State() != raft.Leader || r.CurrentTerm() != term {
				return false
			}
			s.leaderTerm.Store(term)
			s.markCaughtUp()
			s.readyTerm.notify()
			return true
		}
		if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) && r.State() != raft.Leader {
			return false
		}
		s.log.Warn("barrier after election", "err", err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return false
}

// leaderReady waits, at most catchUpWait, until this leader may answer
// reads: its barrier completed in its current term. Call it after
// verifyLeader.
func (s *Service) leaderReady(ctx context.Context) error {
	r := s.raft.Load()
	if r == nil {
		return ErrNotRunning
	}
	timer := time.NewTimer(s.catchUpWait())
	defer timer.Stop()
	for {
		changed := s.readyTerm.wait()
		if r.State() != raft.Leader {
			return ErrNotLeader
		}
		if s.leaderTerm.Load() == r.CurrentTerm() {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("%w: the leader has not applied the entries of earlier terms yet", ErrCatchingUp)
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return ErrNotRunning
		}
	}
}

// waitCaughtUp waits, at most catchUpWait, until this member caught up.
func (s *Service) waitCaughtUp(ctx context.Context) error {
	select {
	case <-s.caughtUp:
		return nil
	default:
	}
	timer := time.NewTimer(s.catchUpWait())
	defer timer.Stop()
	select {
	case <-s.caughtUp:
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: this member has not applied the catalog as of its start yet", ErrCatchingUp)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return ErrNotRunning
	}
}

// Ready reports whether this member can serve the catalog: it caught up,
// knows a meta leader, and its state machine runs. The error says what is
// missing.
func (s *Service) Ready() error {
	r := s.raft.Load()
	if r == nil || s.ctx.Err() != nil {
		return ErrNotRunning
	}
	if err := s.fsm.Err(); err != nil {
		return err
	}
	select {
	case <-s.caughtUp:
	default:
		return fmt.Errorf("%w (applied %d, commit index %d)", ErrCatchingUp, s.applied(), r.CommitIndex())
	}
	if _, id := r.LeaderWithID(); id == "" {
		return ErrNoLeader
	}
	return nil
}

// broadcast wakes every waiter at once: wait returns a channel that the
// next notify closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// Member reports whether this member's Raft holds a configuration that
// lists it: a storage node that joined after the bootstrap has none (it
// is no voter of the meta group) and reads the catalog through the
// members (Ready never passes for it).
func (s *Service) Member() bool {
	r := s.raft.Load()
	if r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == s.cfg.NodeID {
			return true
		}
	}
	return false
}
