package node

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorumbus/quorumbus/node/raftmux"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func openTestStable(t *testing.T, path string) *raftboltdb.BoltStore {
	t.Helper()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRejoinRules: whom a rejoining replica votes for, when it stops
// rejoining, and that its mark outlives a restart until then, even once
// its raft holds state.
func TestRejoinRules(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	path := filepath.Join(t.TempDir(), "stable.db")
	replicas := []Peer{{ID: "a", Addr: "x"}, {ID: "b", Addr: "y"}, {ID: "c", Addr: "z"}}

	s := openTestStable(t, path)
	r, err := openRejoin(s, false, replicas, quiet)
	if err != nil || r == nil {
		t.Fatalf("opened empty: %v, %v; want it rejoining", r, err)
	}
	for _, tc := range []struct {
		what string
		b    raftmux.Ballot
		ok   bool
	}{
		{"its own candidacy", raftmux.Ballot{Self: true}, false},
		{"the bootstrapper with the bootstrap entry alone", raftmux.Ballot{Candidate: "a", LastLogIndex: 1, LastLogTerm: 1}, true},
		{"the bootstrapper past the bootstrap entry", raftmux.Ballot{Candidate: "a", LastLogIndex: 2, LastLogTerm: 2}, false},
		{"another with the bootstrap entry alone", raftmux.Ballot{Candidate: "c", LastLogIndex: 1, LastLogTerm: 1}, false},
		{"another with a long log", raftmux.Ballot{Candidate: "c", LastLogIndex: 90, LastLogTerm: 4}, false},
	} {
		if err := r.withholding(tc.b); (err == nil) != tc.ok {
			t.Errorf("%s: withholding says %v, want a vote %v", tc.what, err, tc.ok)
		}
	}

	// A leader of term 5 announcing commit index 20.
	for _, tc := range []struct {
		what string
		req  raft.AppendEntriesRequest
	}{
		{"a heartbeat", raft.AppendEntriesRequest{Term: 5}},
		{"entries of an older term", raft.AppendEntriesRequest{Term: 5, LeaderCommitIndex: 20, Entries: []*raft.Log{{Index: 25, Term: 4}}}},
		{"the leader's term short of its commit index", raft.AppendEntriesRequest{Term: 5, LeaderCommitIndex: 20, Entries: []*raft.Log{{Index: 19, Term: 5}}}},
	} {
		r.appended(&tc.req, &raft.AppendEntriesResponse{Success: true})
		if !r.active.Load() {
			t.Fatalf("%s ended the rejoin", tc.what)
		}
	}
	s.Close()

	// A restart with Raft state, not yet caught up: still rejoining.
	s = openTestStable(t, path)
	if r, err = openRejoin(s, true, replicas, quiet); err != nil || r == nil {
		t.Fatalf("reopened with state before catching up: %v, %v; want it rejoining", r, err)
	}
	r.appended(&raft.AppendEntriesRequest{Term: 5, LeaderCommitIndex: 20, PrevLogEntry: 21, PrevLogTerm: 5}, &raft.AppendEntriesResponse{Success: true})
	if r.active.Load() {
		t.Fatal("caught up past the leader's commit index in its term, still rejoining")
	}
	if err := r.withholding(raftmux.Ballot{Candidate: "c", LastLogIndex: 90, LastLogTerm: 4}); err != nil {
		t.Fatalf("caught up, it withholds: %v", err)
	}
	s.Close()

	s = openTestStable(t, path)
	defer s.Close()
	if r, err = openRejoin(s, true, replicas, quiet); err != nil || r != nil {
		t.Fatalf("reopened after catching up: %v, %v; want it voting", r, err)
	}
}

// TestMetaFormed: what a first voter's status says of whether the meta
// group formed. A voter halfway through bootstrapping (term 1 written,
// the bootstrap entry not yet) says it did not.
func TestMetaFormed(t *testing.T) {
	for _, c := range []struct {
		term, last uint64
		want       bool
	}{
		{0, 0, false}, // not bootstrapped
		{1, 0, false}, // halfway through bootstrapping
		{1, 1, false}, // bootstrapped
		{7, 1, false}, // bootstrapped, campaigning without votes
		{2, 2, true},  // a leader wrote past the bootstrap entry
		{3, 0, true},  // a log compacted after a snapshot
	} {
		if got := metaFormed(&partitionpb.GroupStatusResponse{Term: c.term, LastIndex: c.last}); got != c.want {
			t.Errorf("term %d, last index %d: formed %v, want %v", c.term, c.last, got, c.want)
		}
	}
}
