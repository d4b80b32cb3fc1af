package raftmux

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestLeadershipConfirmedAt: a follower's answer in the leader's term
// confirms the leadership from when the request was sent; an answer in a
// later term does not, and a quorum needs the quorum-th latest.
func TestLeadershipConfirmedAt(t *testing.T) {
	a, b, c, d, e := startHost(t), startHost(t), startHost(t), startHost(t), startHost(t)
	leader := a.mux.Transport(1, a.addr)
	defer leader.Close()
	var answered int
	answerHeartbeats(b.mux.Transport(1, b.addr), 7, &answered)
	answerHeartbeats(c.mux.Transport(1, c.addr), 8, &answered) // it moved on to term 8
	answerHeartbeats(d.mux.Transport(1, d.addr), 7, &answered)
	beat := func(h *host) time.Time {
		t.Helper()
		before := time.Now()
		var resp raft.AppendEntriesResponse
		if err := leader.AppendEntries("f", h.addr, heartbeatArgs(7), &resp); err != nil {
			t.Fatal(err)
		}
		return before
	}
	voter := func(h *host, id raft.ServerID) raft.Server {
		return raft.Server{Suffrage: raft.Voter, ID: id, Address: h.addr}
	}
	three := raft.Configuration{Servers: []raft.Server{voter(a, "a"), voter(b, "b"), voter(c, "c")}}
	now := time.Now().Add(time.Hour)
	if at := leader.LeadershipConfirmedAt(7, three, "a", now); !at.IsZero() {
		t.Fatalf("confirmed at %v before any follower answered", at)
	}
	if beat(c); !leader.LeadershipConfirmedAt(7, three, "a", now).IsZero() {
		t.Fatal("an answer in a later term confirmed the leadership")
	}
	sentB := beat(b)
	at := leader.LeadershipConfirmedAt(7, three, "a", now)
	if at.Before(sentB) || at.After(time.Now()) {
		t.Fatalf("confirmed at %v, want the heartbeat's send time (after %v)", at, sentB)
	}
	if got := leader.LeadershipConfirmedAt(8, three, "a", now); !got.IsZero() {
		t.Fatalf("term 8 confirmed at %v by answers to term 7", got)
	}
	// Five voters: self and b are two, d makes the quorum of three, and
	// the older of b's and d's answers is when it was confirmed.
	five := raft.Configuration{Servers: append(three.Servers, voter(d, "d"), voter(e, "e"),
		raft.Server{Suffrage: raft.Nonvoter, ID: "n", Address: "nowhere"})}
	if got := leader.LeadershipConfirmedAt(7, five, "a", now); !got.IsZero() {
		t.Fatalf("two of five confirmed the leadership at %v", got)
	}
	beat(d)
	if got := leader.LeadershipConfirmedAt(7, five, "a", now); !got.Equal(at) {
		t.Fatalf("three of five confirmed it at %v, want b's answer's %v", got, at)
	}
	// A single voter confirms itself.
	if got := leader.LeadershipConfirmedAt(7, raft.Configuration{Servers: three.Servers[:1]}, "a", now); !got.Equal(now) {
		t.Fatalf("a single voter confirmed at %v, want now", got)
	}
}

// TestLeadershipConfirmedByRaft: in a live group, the followers' answers
// to hashicorp/raft's heartbeats and appends keep the leader's
// confirmation fresh; once the followers are gone it only ages.
func TestLeadershipConfirmedByRaft(t *testing.T) {
	hosts := []*host{startHost(t), startHost(t), startHost(t)}
	var servers []raft.Server
	for i, h := range hosts {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: h.addr})
	}
	var members []*member
	for i, h := range hosts {
		var boot []raft.Server
		if i == 0 {
			boot = servers
		}
		members = append(members, startMember(t, h, 1, servers[i].ID, boot))
	}
	leader := leaderOf(t, members)
	for i := range 20 {
		if err := leader.r.Apply([]byte(fmt.Sprint(i)), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	conf := raft.Configuration{Servers: servers}
	confirmedWithin := func(d time.Duration) bool {
		now := time.Now()
		return now.Sub(leader.trans.LeadershipConfirmedAt(leader.r.CurrentTerm(), conf, leader.id, now)) < d
	}
	// Heartbeats go every HeartbeatTimeout/10 to /5: 100-200 ms here.
	waitFor(t, "a confirmation within 300 ms", 5*time.Second, func() bool { return confirmedWithin(300 * time.Millisecond) })
	if now := time.Now(); !leader.trans.LeadershipConfirmedAt(leader.r.CurrentTerm()+1, conf, leader.id, now).IsZero() {
		t.Fatal("a later term was confirmed")
	}
	for i, h := range hosts {
		if members[i] != leader {
			h.srv.Stop()
		}
	}
	stopped := time.Now()
	time.Sleep(600 * time.Millisecond)
	if confirmedWithin(time.Since(stopped)) {
		t.Fatalf("confirmed after the followers stopped %v ago", time.Since(stopped))
	}
}
