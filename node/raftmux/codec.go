package raftmux

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/proto/raftpb"
)

// The conversions below copy hashicorp/raft's structs into their protobuf
// mirrors and back, field by field. Byte slices are shared, not copied: a
// decoded message is owned by the one RPC that carries it.

func headerToPB(h raft.RPCHeader) *raftpb.Header {
	return &raftpb.Header{ProtocolVersion: int32(h.ProtocolVersion), Id: h.ID, Addr: h.Addr}
}

func headerFromPB(h *raftpb.Header) raft.RPCHeader {
	if h == nil {
		return raft.RPCHeader{}
	}
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(h.ProtocolVersion), ID: h.Id, Addr: h.Addr}
}

func timeToPB(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func timeFromPB(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func appendEntriesRequestToPB(group uint64, r *raft.AppendEntriesRequest) *raftpb.AppendEntriesRequest {
	pb := &raftpb.AppendEntriesRequest{
		GroupId:           group,
		Header:            headerToPB(r.RPCHeader),
		Term:              r.Term,
		PrevLogEntry:      r.PrevLogEntry,
		PrevLogTerm:       r.PrevLogTerm,
		LeaderCommitIndex: r.LeaderCommitIndex,
	}
	//lint:ignore SA1019 carried for peers that still read it
	pb.Leader = r.Leader
	if len(r.Entries) > 0 {
		// One allocation for all the entries rather than one each.
		logs := make([]raftpb.Log, len(r.Entries))
		pb.Entries = make([]*raftpb.Log, len(r.Entries))
		for i, e := range r.Entries {
			l := &logs[i]
			l.Index = e.Index
			l.Term = e.Term
			l.Type = uint32(e.Type)
			l.Data = e.Data
			l.Extensions = e.Extensions
			l.AppendedAtUnixNano = timeToPB(e.AppendedAt)
			pb.Entries[i] = l
		}
	}
	return pb
}

func appendEntriesRequestFromPB(pb *raftpb.AppendEntriesRequest) *raft.AppendEntriesRequest {
	r := &raft.AppendEntriesRequest{
		RPCHeader:         headerFromPB(pb.Header),
		Term:              pb.Term,
		Leader:            pb.Leader,
		PrevLogEntry:      pb.PrevLogEntry,
		PrevLogTerm:       pb.PrevLogTerm,
		LeaderCommitIndex: pb.LeaderCommitIndex,
	}
	if len(pb.Entries) > 0 {
		logs := make([]raft.Log, len(pb.Entries))
		r.Entries = make([]*raft.Log, len(pb.Entries))
		for i, e := range pb.Entries {
			l := &logs[i]
			l.Index = e.Index
			l.Term = e.Term
			l.Type = raft.LogType(e.Type)
			l.Data = e.Data
			l.Extensions = e.Extensions
			l.AppendedAt = timeFromPB(e.AppendedAtUnixNano)
			r.Entries[i] = l
		}
	}
	return r
}

func appendEntriesResponseToPB(r *raft.AppendEntriesResponse) *raftpb.AppendEntriesResponse {
	return &raftpb.AppendEntriesResponse{
		Header:         headerToPB(r.RPCHeader),
		Term:           r.Term,
		LastLog:        r.LastLog,
		Success:        r.Success,
		NoRetryBackoff: r.NoRetryBackoff,
	}
}

func appendEntriesResponseFromPB(pb *raftpb.AppendEntriesResponse, r *raft.AppendEntriesResponse) {
	*r = raft.AppendEntriesResponse{
		RPCHeader:      headerFromPB(pb.Header),
		Term:           pb.Term,
		LastLog:        pb.LastLog,
		Success:        pb.Success,
		NoRetryBackoff: pb.NoRetryBackoff,
	}
}

func requestVoteRequestToPB(group uint64, r *raft.RequestVoteRequest) *raftpb.RequestVoteRequest {
	pb := &raftpb.RequestVoteRequest{
		GroupId:            group,
		Header:             headerToPB(r.RPCHeader),
		Term:               r.Term,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
	//lint:ignore SA1019 carried for peers that still read it
	pb.Candidate = r.Candidate
	return pb
}

func requestVoteRequestFromPB(pb *raftpb.RequestVoteRequest) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{
		RPCHeader:          headerFromPB(pb.Header),
		Term:               pb.Term,
		Candidate:          pb.Candidate,
		LastLogIndex:       pb.LastLogIndex,
		LastLogTerm:        pb.LastLogTerm,
		LeadershipTransfer: pb.LeadershipTransfer,
	}
}

func requestVoteResponseToPB(r *raft.RequestVoteResponse) *raftpb.RequestVoteResponse {
	return &raftpb.RequestVoteResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Peers:   r.Peers,
		Granted: r.Granted,
	}
}

func requestVoteResponseFromPB(pb *raftpb.RequestVoteResponse, r *raft.RequestVoteResponse) {
	*r = raft.RequestVoteResponse{
		RPCHeader: headerFromPB(pb.Header),
		Term:      pb.Term,
		Peers:     pb.Peers,
		Granted:   pb.Granted,
	}
}

func requestPreVoteRequestToPB(group uint64, r *raft.RequestPreVoteRequest) *raftpb.RequestPreVoteRequest {
	return &raftpb.RequestPreVoteRequest{
		GroupId:      group,
		Header:       headerToPB(r.RPCHeader),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func requestPreVoteRequestFromPB(pb *raftpb.RequestPreVoteRequest) *raft.RequestPreVoteRequest {
	return &raft.RequestPreVoteRequest{
		RPCHeader:    headerFromPB(pb.Header),
		Term:         pb.Term,
		LastLogIndex: pb.LastLogIndex,
		LastLogTerm:  pb.LastLogTerm,
	}
}

func requestPreVoteResponseToPB(r *raft.RequestPreVoteResponse) *raftpb.RequestPreVoteResponse {
	return &raftpb.RequestPreVoteResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Granted: r.Granted,
	}
}

func requestPreVoteResponseFromPB(pb *raftpb.RequestPreVoteResponse, r *raft.RequestPreVoteResponse) {
	*r = raft.RequestPreVoteResponse{
		RPCHeader: headerFromPB(pb.Header),
		Term:      pb.Term,
		Granted:   pb.Granted,
	}
}

func installSnapshotRequestToPB(group uint64, r *raft.InstallSnapshotRequest) *raftpb.InstallSnapshotRequest {
	return &raftpb.InstallSnapshotRequest{
		GroupId:            group,
		Header:             headerToPB(r.RPCHeader),
		SnapshotVersion:    int32(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func installSnapshotRequestFromPB(pb *raftpb.InstallSnapshotRequest) *raft.InstallSnapshotRequest {
	return &raft.InstallSnapshotRequest{
		RPCHeader:          headerFromPB(pb.Header),
		SnapshotVersion:    raft.SnapshotVersion(pb.SnapshotVersion),
		Term:               pb.Term,
		Leader:             pb.Leader,
		LastLogIndex:       pb.LastLogIndex,
		LastLogTerm:        pb.LastLogTerm,
		Peers:              pb.Peers,
		Configuration:      pb.Configuration,
		ConfigurationIndex: pb.ConfigurationIndex,
		Size:               pb.Size,
	}
}

func installSnapshotResponseToPB(r *raft.InstallSnapshotResponse) *raftpb.InstallSnapshotResponse {
	return &raftpb.InstallSnapshotResponse{
		Header:  headerToPB(r.RPCHeader),
		Term:    r.Term,
		Success: r.Success,
	}
}

func installSnapshotResponseFromPB(pb *raftpb.InstallSnapshotResponse, r *raft.InstallSnapshotResponse) {
	*r = raft.InstallSnapshotResponse{
		RPCHeader: headerFromPB(pb.Header),
		Term:      pb.Term,
		Success:   pb.Success,
	}
}

func timeoutNowRequestToPB(group uint64, r *raft.TimeoutNowRequest) *raftpb.TimeoutNowRequest {
	return &raftpb.TimeoutNowRequest{GroupId: group, Header: headerToPB(r.RPCHeader)}
}

func timeoutNowRequestFromPB(pb *raftpb.TimeoutNowRequest) *raft.TimeoutNowRequest {
	return &raft.TimeoutNowRequest{RPCHeader: headerFromPB(pb.Header)}
}

func timeoutNowResponseToPB(r *raft.TimeoutNowResponse) *raftpb.TimeoutNowResponse {
	return &raftpb.TimeoutNowResponse{Header: headerToPB(r.RPCHeader)}
}

func timeoutNowResponseFromPB(pb *raftpb.TimeoutNowResponse, r *raft.TimeoutNowResponse) {
	*r = raft.TimeoutNowResponse{RPCHeader: headerFromPB(pb.Header)}
}

// isHeartbeat reports whether an AppendEntries request is a bare heartbeat,
// by the same test as raft's NetworkTransport, so that it can take the
// transport's heartbeat fast path instead of queueing behind disk writes.
func isHeartbeat(r *raft.AppendEntriesRequest) bool {
	leader := r.RPCHeader.Addr
	if len(leader) == 0 {
		//lint:ignore SA1019 older peers set only this
		leader = r.Leader
	}
	return r.Term != 0 && leader != nil &&
		r.PrevLogEntry == 0 && r.PrevLogTerm == 0 &&
		len(r.Entries) == 0 && r.LeaderCommitIndex == 0
}
