package raftmux

import (
	"io"
	"time"

	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkPipelineRoundTrip sends one AppendEntries of one 1 KiB entry at a
// time through a pipeline to a follower whose raft answers at once: the
// transport's share of a synchronous send's replication round trip.
func BenchmarkPipelineRoundTrip(b *testing.B) {
	leaderHost, followerHost := startHost(b), startHost(b)
	follower := followerHost.mux.Transport(1, followerHost.addr)
	defer follower.Close()
	go func() {
		for rpc := range follower.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		}
	}()
	leader := leaderHost.mux.Transport(1, leaderHost.addr)
	defer leader.Close()
	p, err := leader.AppendEntriesPipeline("f", followerHost.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	pipelineRoundTrips(b, p)
}

// BenchmarkStockPipelineRoundTrip is BenchmarkPipelineRoundTrip through
// hashicorp/raft's own TCP transport, for comparison: what a group's
// replication round trip costs without gRPC.
func BenchmarkStockPipelineRoundTrip(b *testing.B) {
	follower, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer follower.Close()
	go func() {
		for rpc := range follower.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		}
	}()
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer leader.Close()
	p, err := leader.AppendEntriesPipeline("f", follower.LocalAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	pipelineRoundTrips(b, p)
}

// pipelineRoundTrips sends one AppendEntries of one 1 KiB entry at a time
// through p and waits for each answer.
func pipelineRoundTrips(b *testing.B, p raft.AppendPipeline) {
	args := heartbeatArgs(1)
	args.Entries = []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: make([]byte, 1024)}}
	b.ResetTimer()
	for range b.N {
		var resp raft.AppendEntriesResponse
		if _, err := p.AppendEntries(args, &resp); err != nil {
			b.Fatal(err)
		}
		f := <-p.Consumer()
		if err := f.Error(); err != nil {
			b.Fatal(err)
		}
	}
}
