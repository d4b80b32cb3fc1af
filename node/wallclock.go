package node

// wallMs is the node's wall clock in Unix milliseconds: what a leader
// stamps a batch with (Batch.NowMs, the only time the state machine
// knows) and what it reads expiries and due times against. Every wall
// time the node's Service Bus semantics depend on comes from here, so a
// skewed clock (a simulated machine's, set only by tests and the chaos
// suite's build) skews all of them together, as a machine's clock would.
func (n *Node) wallMs() int64 {
	return n.cfg.host.now().UnixMilli()
}
