package node

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/raft"
)

// A replica removed from its group's configuration.
//
// hashicorp/raft's leader stops replicating to a server the moment it
// appends the configuration that removes it, so the removed replica never
// learns of its removal: it hears no leader, and asks the group's voters
// for (pre-)votes every election timeout for as long as it runs. The
// routing table takes its node off the group once placement recorded the
// move done, and the node's agent then removes the replica; until then,
// or while the agent reads a table that lags, it campaigns. So the agent
// asks the group's leader for its configuration when a replica has known
// no leader for a while, and retires the replica when the leader's
// configuration does not hold it: Retire closes it and keeps its data,
// and EnsureGroup leaves it closed while the table still lists it.
// RemoveGroup deletes it once the table no longer does. When the leader's
// configuration holds the replica again (a move brings the group back to
// this node, which starts by adding it as a learner), the agent calls
// Unretire, and the next EnsureGroup opens it.

// ErrRetired refuses to open a replica retired from its group (Retire).
var ErrRetired = errors.New("node: replica retired from its group's configuration")

// Retire closes this node's replica of group id, which its group's
// leader no longer counts as a member, keeping its data; EnsureGroup then
// leaves it closed (ErrRetired) until Unretire or RemoveGroup.
func (n *Node) Retire(id uint64) error {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	n.mu.Lock()
	g := n.groups[id]
	delete(n.groups, id)
	delete(n.troubles, id)
	n.retired[id] = true
	n.mu.Unlock()
	if g == nil {
		return nil
	}
	n.log.Info("replica retired: the group's leader no longer counts it as a member", "group", id)
	if err := g.close(); err != nil {
		return fmt.Errorf("node: retire group %d: %w", id, err)
	}
	return nil
}

// Unretire lets EnsureGroup open group id again.
func (n *Node) Unretire(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.retired, id)
}

// Retired returns the ids of the retired replicas, whose data is kept.
func (n *Node) Retired() []uint64 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Sorted(maps.Keys(n.retired))
}

// isRetired reports whether group id is retired.
func (n *Node) isRetired(id uint64) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.retired[id]
}

// isVoter reports whether the replica's latest configuration holds this
// node as a voter.
func (g *group) isVoter() bool {
	s, ok := g.server(raft.ServerID(g.node.cfg.ID))
	return ok && s.Suffrage == raft.Voter
}
