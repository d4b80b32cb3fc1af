package raftmux

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/raftpb"
)

// roundTrip sends a protobuf message through the wire format, as the
// transport does.
func roundTrip[M proto.Message](t *testing.T, m M, out M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCodecRoundTrip checks that every field of every raft struct survives
// the conversion to protobuf, the wire, and back.
func TestCodecRoundTrip(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n1"), Addr: []byte("127.0.0.1:1")}
	at := time.Unix(1700000000, 123456789)

	ae := &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: 7, Leader: []byte("l"), PrevLogEntry: 41, PrevLogTerm: 6, LeaderCommitIndex: 40,
		Entries: []*raft.Log{
			{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("cmd"), Extensions: []byte("ext"), AppendedAt: at},
			{Index: 43, Term: 7, Type: raft.LogConfiguration, Data: []byte("conf")},
		},
	}
	gotAE := appendEntriesRequestFromPB(roundTrip(t, appendEntriesRequestToPB(9, ae), &raftpb.AppendEntriesRequest{}))
	if gotAE.Entries[0].AppendedAt.Equal(at) {
		gotAE.Entries[0].AppendedAt = at // same instant; drop the monotonic reading and location
	}
	if !reflect.DeepEqual(gotAE, ae) {
		t.Errorf("AppendEntriesRequest:\n got %+v\nwant %+v", gotAE, ae)
	}
	if pb := appendEntriesRequestToPB(9, ae); pb.GroupId != 9 {
		t.Errorf("group id %d", pb.GroupId)
	}

	aer := &raft.AppendEntriesResponse{RPCHeader: hdr, Term: 7, LastLog: 43, Success: true, NoRetryBackoff: true}
	var gotAER raft.AppendEntriesResponse
	appendEntriesResponseFromPB(roundTrip(t, appendEntriesResponseToPB(aer), &raftpb.AppendEntriesResponse{}), &gotAER)
	if !reflect.DeepEqual(&gotAER, aer) {
		t.Errorf("AppendEntriesResponse: got %+v want %+v", gotAER, aer)
	}

	rv := &raft.RequestVoteRequest{RPCHeader: hdr, Term: 8, Candidate: []byte("c"), LastLogIndex: 43, LastLogTerm: 7, LeadershipTransfer: true}
	if got := requestVoteRequestFromPB(roundTrip(t, requestVoteRequestToPB(9, rv), &raftpb.RequestVoteRequest{})); !reflect.DeepEqual(got, rv) {
		t.Errorf("RequestVoteRequest: got %+v want %+v", got, rv)
	}
	rvr := &raft.RequestVoteResponse{RPCHeader: hdr, Term: 8, Peers: []byte("p"), Granted: true}
	var gotRVR raft.RequestVoteResponse
	requestVoteResponseFromPB(roundTrip(t, requestVoteResponseToPB(rvr), &raftpb.RequestVoteResponse{}), &gotRVR)
	if !reflect.DeepEqual(&gotRVR, rvr) {
		t.Errorf("RequestVoteResponse: got %+v want %+v", gotRVR, rvr)
	}

	pv := &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 9, LastLogIndex: 43, LastLogTerm: 7}
	if got := requestPreVoteRequestFromPB(roundTrip(t, requestPreVoteRequestToPB(9, pv), &raftpb.RequestPreVoteRequest{})); !reflect.DeepEqual(got, pv) {
		t.Errorf("RequestPreVoteRequest: got %+v want %+v", got, pv)
	}
	pvr := &raft.RequestPreVoteResponse{RPCHeader: hdr, Term: 9, Granted: true}
	var gotPVR raft.RequestPreVoteResponse
	requestPreVoteResponseFromPB(roundTrip(t, requestPreVoteResponseToPB(pvr), &raftpb.RequestPreVoteResponse{}), &gotPVR)
	if !reflect.DeepEqual(&gotPVR, pvr) {
		t.Errorf("RequestPreVoteResponse: got %+v want %+v", gotPVR, pvr)
	}

	is := &raft.InstallSnapshotRequest{
		RPCHeader: hdr, SnapshotVersion: 1, Term: 9, Leader: []byte("l"), LastLogIndex: 40, LastLogTerm: 6,
		Peers: []byte("p"), Configuration: []byte("c"), ConfigurationIndex: 3, Size: 1 << 20,
	}
	if got := installSnapshotRequestFromPB(roundTrip(t, installSnapshotRequestToPB(9, is), &raftpb.InstallSnapshotRequest{})); !reflect.DeepEqual(got, is) {
		t.Errorf("InstallSnapshotRequest: got %+v want %+v", got, is)
	}
	isr := &raft.InstallSnapshotResponse{RPCHeader: hdr, Term: 9, Success: true}
	var gotISR raft.InstallSnapshotResponse
	installSnapshotResponseFromPB(roundTrip(t, installSnapshotResponseToPB(isr), &raftpb.InstallSnapshotResponse{}), &gotISR)
	if !reflect.DeepEqual(&gotISR, isr) {
		t.Errorf("InstallSnapshotResponse: got %+v want %+v", gotISR, isr)
	}

	tn := &raft.TimeoutNowRequest{RPCHeader: hdr}
	if got := timeoutNowRequestFromPB(roundTrip(t, timeoutNowRequestToPB(9, tn), &raftpb.TimeoutNowRequest{})); !reflect.DeepEqual(got, tn) {
		t.Errorf("TimeoutNowRequest: got %+v want %+v", got, tn)
	}
	tnr := &raft.TimeoutNowResponse{RPCHeader: hdr}
	var gotTNR raft.TimeoutNowResponse
	timeoutNowResponseFromPB(roundTrip(t, timeoutNowResponseToPB(tnr), &raftpb.TimeoutNowResponse{}), &gotTNR)
	if !reflect.DeepEqual(&gotTNR, tnr) {
		t.Errorf("TimeoutNowResponse: got %+v want %+v", gotTNR, tnr)
	}
}

func TestIsHeartbeat(t *testing.T) {
	hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte("a")}, Term: 3}
	if !isHeartbeat(hb) {
		t.Error("bare AppendEntries is not a heartbeat")
	}
	withCommit := *hb
	withCommit.LeaderCommitIndex = 5
	withEntries := *hb
	withEntries.Entries = []*raft.Log{{Index: 1}}
	for _, r := range []*raft.AppendEntriesRequest{&withCommit, &withEntries, {Term: 3}} {
		if isHeartbeat(r) {
			t.Errorf("%+v taken for a heartbeat", r)
		}
	}
}
