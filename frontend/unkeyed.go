package frontend

import (
	"math/rand/v2"
	"sync"
)

// Unkeyed sends to a partitioned entity go round-robin over its
// partitions (Service Bus does so), but a Raft entry costs about the same
// whatever it carries, fsynced by three replicas: what makes sends cheap
// is many requests in one entry, and a group's proposer packs only the
// requests that reach it while its entries are in flight. Four links each
// moving to the next partition per request spread their requests over
// eight groups that each took them one entry a request: 8-11 entries per
// 1,000 messages where a plain queue, one group, took 3.
//
// So the links of a front-end that send to one entity share one cursor,
// which stays on a partition while the front-end's requests to it are in
// flight, so that concurrent requests meet in its group's entries, and
// moves on:
//
//   - when nothing of this front-end is in flight there: a request that
//     meets nobody costs an entry wherever it goes, so a lone or
//     synchronous sender still goes round-robin, request by request;
//   - when it took unkeyedStayBytes since it came there: a steady load
//     still spreads over every partition;
//   - when it has unkeyedSpillBytes in flight there: more than a group's
//     entries in flight carry, so what comes next would wait a whole
//     commit behind them, where another group takes it at once. This is
//     the load that partitions spread over groups for throughput.
//
// Front-ends start their cursors at random partitions, so that several
// front-ends sending to one entity are on different groups.
const (
	// unkeyedStayBytes: after each move the first requests find the new
	// group's entry slots free and go one entry each, so the stay is
	// long enough to make that a small part of it.
	unkeyedStayBytes = 8 << 20
	// unkeyedSpillBytes is a group's pipeline twice over: its proposer
	// has 4 entries of 512 KiB in flight (node/propose.go, maxInFlight
	// and maxBatchBytes), and as much again waits for them.
	unkeyedSpillBytes = 4 << 20
)

// unkeyedCursor chooses the partitions of one entity's unkeyed requests
// from one front-end (the rules above). Its methods are safe for
// concurrent use by the entity's sending links.
type unkeyedCursor struct {
	mu     sync.Mutex
	at     uint32 // the partition requests go to
	stayed int    // bytes sent to at since the cursor came there
	// flight is, per partition, this front-end's requests in flight there
	// and their bytes; sized by the entity's partitions.
	flight []unkeyedFlight
}

type unkeyedFlight struct {
	requests, bytes int
}

// pick returns the partition of a request of bytes of unkeyed messages to
// an entity of n partitions, counting it in flight there until done.
// serving reports whether a partition's group can be expected to take a
// send (Backend.Serving): the cursor passes over those that cannot,
// unless none can.
func (c *unkeyedCursor) pick(n uint32, bytes int, serving func(uint32) bool) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.flight) != int(n) {
		// A new cursor, or an entity made anew with another count.
		c.flight = make([]unkeyedFlight, n)
		c.at, c.stayed = rand.Uint32N(n), 0
	}
	f := c.flight[c.at]
	if f.requests == 0 || c.stayed >= unkeyedStayBytes || f.bytes >= unkeyedSpillBytes || !serving(c.at) {
		c.at, c.stayed = c.next(n, serving), 0
	}
	c.stayed += bytes
	c.flight[c.at].requests++
	c.flight[c.at].bytes += bytes
	return c.at
}

// next is the first partition after at that serves, or the one after at
// when none does.
func (c *unkeyedCursor) next(n uint32, serving func(uint32) bool) uint32 {
	for i := uint32(1); i <= n; i++ {
		if p := (c.at + i) % n; serving(p) {
			return p
		}
	}
	return (c.at + 1) % n
}

// done ends a request that pick placed in partition p.
func (c *unkeyedCursor) done(p uint32, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(p) < len(c.flight) {
		c.flight[p].requests--
		c.flight[p].bytes -= bytes
	}
}
