package cluster

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/raftpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// TestClusterRoles: a dev cluster's node answers each role's certificate
// (the node's own, the front-end's, the gateway's, the CLI's) on the
// methods the role admits and refuses the rest with PermissionDenied
// before the service runs: only a node reaches Raft, group membership,
// the placement controller's entity calls and the meta group's reports;
// a front-end cannot change the catalog but a subscription's rules (the
// SDKs' rule managers); only nodes and the CLI read a group's or the
// catalog's digest.
func TestClusterRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev, err := StartDev(ctx, DevOptions{DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", Nodes: 1, Groups: 1, CacheMB: 8, LogLevel: "error"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dial := func(name string) *grpc.ClientConn {
		f := dev.ClusterTLS[name]
		cl, err := certs.NewCluster(f.Cert, f.Key, f.CA, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		cc, err := rpcnet.Dial(dev.NodeAddrs[0], rpcnet.NewCreds(cl.ServerConfig(), cl.ClientConfig()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	type call struct {
		name  string
		admit []string // the roles the node must let through
		do    func(ctx context.Context, cc *grpc.ClientConn) error
	}
	all := []string{"node", "frontend", "gateway", "cli"}
	calls := []call{
		// Harmless requests: a group that does not exist, a rule on
		// nothing. What matters is whether the service saw them.
		{"Raft.TimeoutNow", []string{"node"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := raftpb.NewRaftClient(cc).TimeoutNow(ctx, &raftpb.TimeoutNowRequest{GroupId: 1 << 40})
			return err
		}},
		{"Raft.AppendEntriesPipeline", []string{"node"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			s, err := raftpb.NewRaftClient(cc).AppendEntriesPipeline(ctx)
			if err != nil {
				return err
			}
			// A refusal can close the stream before the request is
			// sent: Send then reports io.EOF and the status comes
			// from Recv, as gRPC documents for client streams.
			if err := s.Send(&raftpb.AppendEntriesRequest{GroupId: 1 << 40}); err != nil && err != io.EOF {
				return err
			}
			_, err = s.Recv()
			return err
		}},
		{"GroupMembership.ChangeReplica", []string{"node"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := partitionpb.NewGroupMembershipClient(cc).ChangeReplica(ctx, &partitionpb.ChangeReplicaRequest{GroupId: 1 << 40})
			return err
		}},
		{"PartitionService.UpsertEntity", []string{"node"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := partitionpb.NewPartitionServiceClient(cc).UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{GroupId: 1 << 40})
			return err
		}},
		{"PartitionService.Stats", all, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := partitionpb.NewPartitionServiceClient(cc).Stats(ctx, &partitionpb.StatsRequest{GroupId: 1 << 40})
			return err
		}},
		{"PartitionService.Digest", []string{"node", "cli"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := partitionpb.NewPartitionServiceClient(cc).Digest(ctx, &partitionpb.DigestRequest{GroupId: 1 << 40})
			return err
		}},
		{"PlacementService.ReportGroups", []string{"node"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := placementpb.NewPlacementServiceClient(cc).ReportGroups(ctx, &placementpb.ReportGroupsRequest{})
			return err
		}},
		{"PlacementService.DeleteAuthorizationRule", []string{"node", "gateway", "cli"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := placementpb.NewPlacementServiceClient(cc).DeleteAuthorizationRule(ctx, &placementpb.DeleteAuthorizationRuleRequest{Name: "no-such-rule"})
			return err
		}},
		// A front-end manages rules for the SDKs' rule managers.
		{"PlacementService.RemoveRule", all, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := placementpb.NewPlacementServiceClient(cc).RemoveRule(ctx, &placementpb.RemoveRuleRequest{Subscription: "none/Subscriptions/none", RuleName: "r"})
			return err
		}},
		{"PlacementService.CatalogDigest", []string{"node", "cli"}, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := placementpb.NewPlacementServiceClient(cc).CatalogDigest(ctx, &placementpb.CatalogDigestRequest{})
			return err
		}},
		{"PlacementService.WatchRoutes", all, func(ctx context.Context, cc *grpc.ClientConn) error {
			s, err := placementpb.NewPlacementServiceClient(cc).WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}},
		{"PlacementService.ListEntities", all, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := placementpb.NewPlacementServiceClient(cc).ListEntities(ctx, &placementpb.ListEntitiesRequest{})
			return err
		}},
	}
	for _, role := range all {
		name := role
		if role == "node" {
			name = "dev-1"
		}
		cc := dial(name)
		for _, c := range calls {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.do(cctx, cc)
			ccancel()
			denied := status.Code(err) == codes.PermissionDenied
			admitted := false
			for _, r := range c.admit {
				admitted = admitted || r == role
			}
			if denied == admitted {
				t.Errorf("%s calling %s: %v (admitted by the table: %v)", role, c.name, err, admitted)
			}
		}
	}
}
