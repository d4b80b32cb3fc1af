package node

import (
	"errors"

	"google.golang.org/grpc"
)

// Register adds gRPC services to the node's one port; in a storage process
// cmd puts the placement service there too. It must be called before
// Start.
func (n *Node) Register(register func(*grpc.Server)) error {
	n.mu.RLock()
	started := n.started
	n.mu.RUnlock()
	if started {
		return errors.New("node: Register after Start")
	}
	register(n.srv)
	return nil
}
