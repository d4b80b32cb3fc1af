package raftmux

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// A leader may answer a read from its own state only while no other
// replica can have been elected: hashicorp/raft's VerifyLeader proves it
// with a round of heartbeats to the followers, one network round trip
// per read. The leader's replication already proves it every
// HeartbeatTimeout/10: a follower that answers an AppendEntries of term T
// with term T had not moved past T when it answered, so no leader of a
// later term had been elected before that request was sent (an election
// needs a quorum, and a quorum shares a member with the followers that
// answered). The transport sees those answers, which hashicorp/raft keeps
// to itself, and keeps the latest per follower.

// ack is a follower's latest acknowledgement of this replica's leadership:
// the term of an AppendEntries (heartbeats included) it answered in that
// term, and when the request was sent.
type ack struct {
	term uint64
	sent time.Time
}

// acknowledge records that target answered a request of term, sent at
// sent, in that term. Its answer in a later term (it has moved on) records
// nothing: the ack it had stays, and ages out.
func (t *Transport) acknowledge(target raft.ServerAddress, term uint64, sent time.Time, resp *raft.AppendEntriesResponse) {
	if resp.Term != term {
		return
	}
	t.acks.Store(target, ack{term: term, sent: sent})
}

// LeadershipConfirmedAt returns the latest time by which a quorum of
// conf's voters had acknowledged this replica (self) as the leader of
// term: no other leader was elected before it. Self counts as
// acknowledging now. The zero time when no quorum acknowledged term.
//
// A read answered from the leader's state at now is therefore stale by
// at most now minus that time, and only if the replica was deposed since.
func (t *Transport) LeadershipConfirmedAt(term uint64, conf raft.Configuration, self raft.ServerID, now time.Time) time.Time {
	var at []time.Time
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		switch v, ok := t.acks.Load(s.Address); {
		case s.ID == self:
			at = append(at, now)
		case ok && v.(ack).term == term:
			at = append(at, v.(ack).sent)
		default:
			at = append(at, time.Time{})
		}
	}
	if len(at) == 0 {
		return time.Time{}
	}
	// The quorum-th latest: a quorum acknowledged at or after it.
	slices.SortFunc(at, func(a, b time.Time) int { return b.Compare(a) })
	return at[len(at)/2]
}
