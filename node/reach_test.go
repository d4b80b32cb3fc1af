package node_test

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
)

// A leader whose followers hear it over its own connections but cannot
// reach it (deafness: nothing anyone else opens to its node gets through)
// would lead forever while no client reaches it. Its followers tell it so
// when it asks, and it hands its leadership over within a few checks.
func TestDeafLeaderHandsOver(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Cuttable: true,
		Configure: func(i int, cfg *node.Config) {
			fastElections(i, cfg)
			cfg.ReachCheck = 300 * time.Millisecond
		}})
	deaf := c.Leader(group)
	start := time.Now()
	c.Deafen(deaf)
	c.WaitFor("another node to lead the deaf node's group", func() bool {
		for i := range c.Len() {
			if i == deaf {
				continue
			}
			if st, err := c.Node(i).Group(group); err == nil && st.State == raft.Leader && st.Serving {
				return true
			}
		}
		return false
	})
	t.Logf("leadership left the deaf node after %v", time.Since(start).Round(10*time.Millisecond))
	c.Heal()

	// A healthy leader keeps its leadership through many checks.
	leader := soleLeader(t, c)
	time.Sleep(3 * time.Second)
	if now := soleLeader(t, c); now != leader {
		t.Fatalf("the leadership moved from node %d to %d with nothing wrong", leader, now)
	}
}

// soleLeader waits until one node alone counts itself the group's leader
// (an old leader steps down once it hears of the new term) and returns it.
func soleLeader(t *testing.T, c *nodetest.Cluster) int {
	t.Helper()
	leader := -1
	c.WaitFor("one leader of the group", func() bool {
		leader = -1
		for i := range c.Len() {
			if st, err := c.Node(i).Group(group); err == nil && st.State == raft.Leader {
				if leader >= 0 {
					return false
				}
				leader = i
			}
		}
		return leader >= 0
	})
	return leader
}
