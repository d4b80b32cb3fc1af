package routing

import (
	"context"

	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// localClient calls a PartitionService that runs in this process (a
// storage node beside the front-end, as in `quorumbus dev`) as a method
// call: no encoding, no HTTP/2 framing and no loopback socket between the
// front-end and the leader, which per message sent is two copies of its
// body through the kernel and two through protobuf. Answers and errors
// are the service's own, so retries and leader hints work as over gRPC.
//
// Requests are shared with the service rather than copied, so the router
// never changes one after the call: each attempt builds its request, and
// what it carries (messages, tokens) is not written once handed over.
type localClient struct {
	s partitionpb.PartitionServiceServer
}

var _ partitionpb.PartitionServiceClient = localClient{}

func (c localClient) UpsertEntity(ctx context.Context, in *partitionpb.UpsertEntityRequest, _ ...grpc.CallOption) (*partitionpb.UpsertEntityResponse, error) {
	return c.s.UpsertEntity(ctx, in)
}

func (c localClient) DeleteEntity(ctx context.Context, in *partitionpb.DeleteEntityRequest, _ ...grpc.CallOption) (*partitionpb.DeleteEntityResponse, error) {
	return c.s.DeleteEntity(ctx, in)
}

func (c localClient) Send(ctx context.Context, in *partitionpb.SendRequest, _ ...grpc.CallOption) (*partitionpb.SendResponse, error) {
	return c.s.Send(ctx, in)
}

func (c localClient) Receive(ctx context.Context, in *partitionpb.ReceiveRequest, _ ...grpc.CallOption) (*partitionpb.ReceiveResponse, error) {
	return c.s.Receive(ctx, in)
}

func (c localClient) Settle(ctx context.Context, in *partitionpb.SettleRequest, _ ...grpc.CallOption) (*partitionpb.SettleResponse, error) {
	return c.s.Settle(ctx, in)
}

func (c localClient) RenewLocks(ctx context.Context, in *partitionpb.RenewLocksRequest, _ ...grpc.CallOption) (*partitionpb.RenewLocksResponse, error) {
	return c.s.RenewLocks(ctx, in)
}

func (c localClient) Stats(ctx context.Context, in *partitionpb.StatsRequest, _ ...grpc.CallOption) (*partitionpb.StatsResponse, error) {
	return c.s.Stats(ctx, in)
}

func (c localClient) GroupStats(ctx context.Context, in *partitionpb.GroupStatsRequest, _ ...grpc.CallOption) (*partitionpb.GroupStatsResponse, error) {
	return c.s.GroupStats(ctx, in)
}

func (c localClient) Peek(ctx context.Context, in *partitionpb.PeekRequest, _ ...grpc.CallOption) (*partitionpb.PeekResponse, error) {
	return c.s.Peek(ctx, in)
}

func (c localClient) CancelScheduled(ctx context.Context, in *partitionpb.CancelScheduledRequest, _ ...grpc.CallOption) (*partitionpb.CancelScheduledResponse, error) {
	return c.s.CancelScheduled(ctx, in)
}

func (c localClient) ReceiveDeferred(ctx context.Context, in *partitionpb.ReceiveDeferredRequest, _ ...grpc.CallOption) (*partitionpb.ReceiveDeferredResponse, error) {
	return c.s.ReceiveDeferred(ctx, in)
}

func (c localClient) AcceptSession(ctx context.Context, in *partitionpb.AcceptSessionRequest, _ ...grpc.CallOption) (*partitionpb.AcceptSessionResponse, error) {
	return c.s.AcceptSession(ctx, in)
}

func (c localClient) RenewSessionLock(ctx context.Context, in *partitionpb.RenewSessionLockRequest, _ ...grpc.CallOption) (*partitionpb.RenewSessionLockResponse, error) {
	return c.s.RenewSessionLock(ctx, in)
}

func (c localClient) SetSessionState(ctx context.Context, in *partitionpb.SetSessionStateRequest, _ ...grpc.CallOption) (*partitionpb.SetSessionStateResponse, error) {
	return c.s.SetSessionState(ctx, in)
}

func (c localClient) GetSessionState(ctx context.Context, in *partitionpb.GetSessionStateRequest, _ ...grpc.CallOption) (*partitionpb.GetSessionStateResponse, error) {
	return c.s.GetSessionState(ctx, in)
}

func (c localClient) ReleaseSession(ctx context.Context, in *partitionpb.ReleaseSessionRequest, _ ...grpc.CallOption) (*partitionpb.ReleaseSessionResponse, error) {
	return c.s.ReleaseSession(ctx, in)
}

func (c localClient) Digest(ctx context.Context, in *partitionpb.DigestRequest, _ ...grpc.CallOption) (*partitionpb.DigestResponse, error) {
	return c.s.Digest(ctx, in)
}

func (c localClient) ListSessions(ctx context.Context, in *partitionpb.ListSessionsRequest, _ ...grpc.CallOption) (*partitionpb.ListSessionsResponse, error) {
	return c.s.ListSessions(ctx, in)
}

func (c localClient) Purge(ctx context.Context, in *partitionpb.PurgeRequest, _ ...grpc.CallOption) (*partitionpb.PurgeResponse, error) {
	return c.s.Purge(ctx, in)
}

func (c localClient) Redrive(ctx context.Context, in *partitionpb.RedriveRequest, _ ...grpc.CallOption) (*partitionpb.RedriveResponse, error) {
	return c.s.Redrive(ctx, in)
}
