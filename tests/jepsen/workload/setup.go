package workload

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Placement reaches the placement service through the storage nodes'
// gRPC addresses; any node forwards to the meta group's leader.
type Placement struct {
	// Addrs are the nodes' gRPC addresses; Dial connects to node i.
	Addrs []string
	Dial  func(i int) func(ctx context.Context, network, addr string) (net.Conn, error)
}

// client returns a client of node i and a function that closes it.
func (p Placement) client(i int) (placementpb.PlacementServiceClient, func(), error) {
	cc, err := grpc.NewClient("passthrough:///"+p.Addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return p.Dial(i)(ctx, "tcp", addr)
		}))
	if err != nil {
		return nil, nil, err
	}
	return placementpb.NewPlacementServiceClient(cc), func() { cc.Close() }, nil
}

// Create creates entities in order (a topic before its subscriptions),
// trying each node until each exists or ctx ends.
func (p Placement) Create(ctx context.Context, reqs ...*placementpb.CreateEntityRequest) error {
	for _, req := range reqs {
		var last error
		for try := 0; ; try++ {
			c, closeFn, err := p.client(try % len(p.Addrs))
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = c.CreateEntity(cctx, req)
				cancel()
				closeFn()
			}
			if err == nil || status.Code(err) == codes.AlreadyExists {
				break
			}
			last = err
			select {
			case <-ctx.Done():
				return fmt.Errorf("create %s: %w", req.Name, last)
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	return nil
}
