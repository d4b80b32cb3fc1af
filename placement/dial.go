package placement

import (
	"errors"
	"sync"

	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// dialer hands out clients of storage nodes and of other meta members. The
// configured dial functions win; otherwise it keeps one gRPC connection per
// address (rpcnet.Dial with creds) until Close.
type dialer struct {
	creds       *rpcnet.Creds
	partitionFn func(addr string) (partitionpb.PartitionServiceClient, error)
	placementFn func(addr string) (pb.PlacementServiceClient, error)

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

var errDialerClosed = errors.New("placement: closed")

func newDialer(
	creds *rpcnet.Creds,
	partition func(string) (partitionpb.PartitionServiceClient, error),
	placement func(string) (pb.PlacementServiceClient, error),
) *dialer {
	return &dialer{creds: creds, partitionFn: partition, placementFn: placement, conns: map[string]*grpc.ClientConn{}}
}

func (d *dialer) partition(addr string) (partitionpb.PartitionServiceClient, error) {
	if d.partitionFn != nil {
		return d.partitionFn(addr)
	}
	cc, err := d.conn(addr)
	if err != nil {
		return nil, err
	}
	return partitionpb.NewPartitionServiceClient(cc), nil
}

// membership returns a GroupMembership client of a storage node.
func (d *dialer) membership(addr string) (partitionpb.GroupMembershipClient, error) {
	cc, err := d.conn(addr)
	if err != nil {
		return nil, err
	}
	return partitionpb.NewGroupMembershipClient(cc), nil
}

func (d *dialer) placement(addr string) (pb.PlacementServiceClient, error) {
	if d.placementFn != nil {
		return d.placementFn(addr)
	}
	cc, err := d.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewPlacementServiceClient(cc), nil
}

func (d *dialer) conn(addr string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errDialerClosed
	}
	if cc, ok := d.conns[addr]; ok {
		return cc, nil
	}
	cc, err := rpcnet.Dial(addr, d.creds)
	if err != nil {
		return nil, err
	}
	d.conns[addr] = cc
	return cc, nil
}

func (d *dialer) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	var errs []error
	for addr, cc := range d.conns {
		errs = append(errs, cc.Close())
		delete(d.conns, addr)
	}
	return errors.Join(errs...)
}
