package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Group commit (STYLE 5). Every request a group's leader serves becomes one
// or more commands; the proposer packs the commands of concurrent requests
// into one Batch, that is one Raft entry, and hands each request its own
// results when the entry has been applied.
//
// There is no timer: a batch goes out as soon as a slot is free (one of
// maxInFlight; beyond the first, shared with the node's other groups),
// carrying whatever requests have queued by then. A lone synchronous
// request therefore finds a free slot and is proposed at once; under load
// the slots are busy, requests queue while earlier entries are fsynced and
// replicated, and the next entry carries them all. The batch size follows
// the load by itself.
//
// Why these limits (the commits that set them have the measurements):
//   - maxInFlight 4: hashicorp/raft writes and replicates the entries it
//     finds queued together (BatchApplyCh, MaxAppendEntries), so a few
//     entries in flight already overlap one entry's fsync with the next
//     one's batching; more in flight only makes entries smaller and costs
//     server CPU per message. In the dev cluster 4 beat 8 in alternated
//     runs of sends and receives, and 2, 3 and 6 did not differ from 4
//     beyond the noise; a lone request still goes out at once.
//   - sharedInFlight 3: the groups a node leads share the entries in
//     flight beyond each one's first. An entry costs each replica a write,
//     an fsync and an apply nearly whatever it carries, and the groups of
//     a node share its CPU and disk: with slots of their own, the eight
//     groups of a 16-partition queue kept up to 32 entries in flight where
//     a plain queue's group keeps 4, and each carried half as much (four
//     receivers draining: 12.6-13.1 entries per 1,000 messages against
//     5.9). A group's first entry never waits for the pool, so an idle
//     group's lone request goes out at once whatever the others do, and
//     one busy group alone still keeps maxInFlight. A group that lost its
//     quorum holds its shared slots until its entries fail (the leader
//     lease, one election timeout); the others keep their first.
//   - maxBatchBytes 512 KiB: the dev cluster sent faster with it than with
//     256 KiB and received alike, though entries average under 256 KiB
//     either way (why it still wins is not understood yet). The limit is a
//     target: the request that crosses it still joins the batch.
//   - maxBatchRequests 1024: bounds the waiters one entry wakes and the
//     work of one apply when requests are tiny (settles of one token).
//   - maxRequestBytes 4 MiB: one request larger than this is refused; a
//     send carrying larger messages stages their bodies first (stage.go).
//     With maxBatchBytes it bounds an entry (maxEntryBytes), which must
//     stay far below what the log store reads back (raft-wal refuses
//     frames over 64 MiB as corrupt) and what a log cache of a few MiB
//     can hold a few of.
const (
	maxInFlight      = 4
	sharedInFlight   = 3
	maxBatchBytes    = 512 << 10
	maxBatchRequests = 1024
	maxRequestBytes  = 4 << 20
	proposeQueue     = 4096 // requests waiting for the proposer goroutine

	// maxEntryBytes bounds an encoded entry: the batch stops gathering
	// once it holds maxBatchBytes, so its last request starts below that;
	// the rest is the Batch's framing (tags and lengths of at most
	// maxBatchRequests requests' commands, the clock, the proposer).
	maxEntryBytes = maxBatchBytes + maxRequestBytes + 1<<20
)

// proposal is one client request on its way into a Raft entry.
type proposal struct {
	cmds []*partitionpb.Command
	size int
	done chan proposalResult // buffered: the proposer never blocks on it
}

type proposalResult struct {
	results []*partitionpb.Result
	err     error
}

type proposer struct {
	g  *group
	in chan *proposal
	// inFlight counts this group's entries proposed and not yet answered
	// (run adds, apply takes away); freed wakes run when one is answered.
	inFlight atomic.Int32
	freed    chan struct{}
	// sharedMu guards shared, the node's shared slots this group's
	// entries hold, and abandoned: the proposer stopped and gave them
	// back (giveBackShared), so the entries' own releases do not.
	sharedMu  sync.Mutex
	shared    int
	abandoned bool
	// queued is the bytes of the requests in in, not yet taken into a
	// batch; admitSend reads it.
	queued atomic.Int64

	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error
}

func newProposer(g *group) *proposer {
	return &proposer{
		g:       g,
		in:      make(chan *proposal, proposeQueue),
		freed:   make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
}

// stop ends the proposer; queued requests fail with err.
func (p *proposer) stop(err error) {
	p.stopOnce.Do(func() {
		p.stopErr = err
		close(p.stopped)
	})
}

// propose submits the commands of one request and waits for their results,
// one per command. If ctx ends first the commands may still be applied.
func (g *group) propose(ctx context.Context, cmds ...*partitionpb.Command) ([]*partitionpb.Result, error) {
	size := 0
	for _, c := range cmds {
		size += proto.Size(c)
	}
	if size > maxRequestBytes {
		return nil, fmt.Errorf("%w: %d bytes of commands, at most %d", ErrTooLarge, size, maxRequestBytes)
	}
	pr := &proposal{cmds: cmds, size: size, done: make(chan proposalResult, 1)}
	g.prop.queued.Add(int64(size))
	select {
	case g.prop.in <- pr:
	case <-g.prop.stopped:
		g.prop.queued.Add(-int64(size))
		return nil, g.prop.stopErr
	case <-ctx.Done():
		g.prop.queued.Add(-int64(size))
		return nil, ctx.Err()
	}
	select {
	case r := <-pr.done:
		return r.results, r.err
	case <-g.prop.stopped:
		// The group stopped. Raft may never answer the entry that carries
		// this request (a future buffered when it shut down stays
		// unanswered: hashicorp/raft#498), so do not wait for it; like a
		// lost leadership, the outcome is unknown to the caller.
		select {
		case r := <-pr.done:
			return r.results, r.err
		default:
			return nil, g.prop.stopErr
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// admitSend refuses a send with ErrBusy while more than
// Config.MaxQueuedSendBytes of requests wait for the proposer, or the
// queue's slots are three-quarters taken (the rest stays for settles).
// Without it a send would wait in the queue until its caller gave up,
// and the queue, not the client, would hold the backlog. A send larger
// than the bound passes when the queue is empty.
func (p *proposer) admitSend(max int64) error {
	if max < 0 {
		return nil
	}
	if q := p.queued.Load(); q > max {
		return fmt.Errorf("%w: %d bytes of requests wait for group %d's proposer, at most %d", ErrBusy, q, p.g.id, max)
	}
	if n := len(p.in); n >= cap(p.in)*3/4 {
		return fmt.Errorf("%w: %d requests wait for group %d's proposer", ErrBusy, n, p.g.id)
	}
	return nil
}

// run gathers requests into batches and proposes each batch once a slot is
// free.
func (p *proposer) run() {
	var (
		batch []*proposal
		bytes int
	)
	full := func() bool { return len(batch) >= maxBatchRequests || bytes >= maxBatchBytes }
	add := func(pr *proposal) {
		p.queued.Add(-int64(pr.size))
		batch = append(batch, pr)
		bytes += pr.size
	}
	for {
		if len(batch) == 0 {
			select {
			case pr := <-p.in:
				add(pr)
			case <-p.stopped:
				p.drain(nil)
				return
			}
		}
		// Take what is already queued.
	gather:
		for !full() {
			select {
			case pr := <-p.in:
				add(pr)
			default:
				break gather
			}
		}
		shared, ok := p.awaitSlot(add, full)
		if !ok {
			p.drain(batch)
			return
		}
		go p.apply(batch, shared)
		batch, bytes = nil, 0
	}
}

// awaitSlot waits until the gathered batch may go out, taking in what
// arrives meanwhile (add, while not full), and counts it in flight. The
// group's first entry in flight needs nothing more; each further one, up
// to maxInFlight, a slot of the node's shared pool (shared true), given
// back by release. ok is false when the proposer stopped.
func (p *proposer) awaitSlot(add func(*proposal), full func() bool) (shared, ok bool) {
	for {
		n := p.inFlight.Load() // only this goroutine adds; apply takes away
		if n == 0 {
			p.inFlight.Add(1)
			return false, true
		}
		in := p.in
		if full() {
			in = nil
		}
		var pool chan struct{}
		if n < maxInFlight {
			pool = p.g.node.sharedSlots
		}
		select {
		case pool <- struct{}{}:
			p.inFlight.Add(1)
			p.sharedMu.Lock()
			p.shared++
			p.sharedMu.Unlock()
			return true, true
		case <-p.freed:
		case pr := <-in:
			add(pr)
		case <-p.stopped:
			return false, false
		}
	}
}

// release ends an entry's time in flight (awaitSlot).
func (p *proposer) release(shared bool) {
	if shared {
		p.sharedMu.Lock()
		if !p.abandoned {
			p.shared--
			<-p.g.node.sharedSlots
		}
		p.sharedMu.Unlock()
	}
	p.inFlight.Add(-1)
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// giveBackShared returns the node's shared slots this group's entries
// hold, once the proposer stopped: raft may never answer an entry
// buffered when the group shut down (hashicorp/raft#498), and its slot
// would be lost to every other group of the node.
func (p *proposer) giveBackShared() {
	p.sharedMu.Lock()
	defer p.sharedMu.Unlock()
	for ; p.shared > 0; p.shared-- {
		<-p.g.node.sharedSlots
	}
	p.abandoned = true
}

// drain fails the given and every queued request after stop, and gives
// back the shared slots.
func (p *proposer) drain(batch []*proposal) {
	p.giveBackShared()
	for _, pr := range batch {
		pr.done <- proposalResult{err: p.stopErr}
	}
	for {
		select {
		case pr := <-p.in:
			pr.done <- proposalResult{err: p.stopErr}
		default:
			return
		}
	}
}

// apply proposes one batch as one Raft entry, waits until it is applied
// and hands each request its results. It holds one slot throughout.
func (p *proposer) apply(batch []*proposal, shared bool) {
	defer p.release(shared)
	g := p.g
	n := 0
	for _, pr := range batch {
		n += len(pr.cmds)
	}
	b := &partitionpb.Batch{
		NowMs:    g.node.wallMs(),
		Commands: make([]*partitionpb.Command, 0, n),
		// This replica answers the batch; the others skip reading back
		// the message bodies its results carry.
		Proposer: g.node.cfg.ID,
	}
	// Whether a command may move a due time of the leader's clock loop
	// (runClock) is partition's to say.
	timed, sends := false, false
	for _, pr := range batch {
		b.Commands = append(b.Commands, pr.cmds...)
		for _, c := range pr.cmds {
			timed = timed || partition.RearmsTimers(c)
			sends = sends || c.GetEnqueue() != nil
		}
	}
	if sends {
		// At the batch's time, set above: the rules of sends to topics
		// are evaluated here once rather than by every replica.
		g.machine.PlanTopicSends(b)
	}
	start := time.Now()
	results, err := p.commit(b)
	if err == nil {
		g.observe(latencyCommit, start)
	}
	if err == nil && len(results) != n {
		err = fmt.Errorf("node: group %d: %d results for %d commands", g.id, len(results), n)
	}
	if timed && err == nil {
		select {
		case g.locksCh <- struct{}{}:
		default:
		}
	}
	// Counted before anyone is answered: a caller that has its answer
	// sees its request counted.
	g.entries.Add(1)
	g.requests.Add(uint64(len(batch)))
	off := 0
	for _, pr := range batch {
		if err != nil {
			pr.done <- proposalResult{err: err}
			continue
		}
		pr.done <- proposalResult{results: results[off : off+len(pr.cmds) : off+len(pr.cmds)]}
		off += len(pr.cmds)
	}
}

// commit encodes a batch, proposes it and returns its results once applied
// on this replica.
func (p *proposer) commit(b *partitionpb.Batch) ([]*partitionpb.Result, error) {
	g := p.g
	data, err := partition.EncodeBatch(b)
	if err != nil {
		return nil, err
	}
	if len(data) > maxEntryBytes {
		// Never written: an entry the log store cannot read back would
		// make the group unable to restart.
		return nil, fmt.Errorf("%w: an entry of %d bytes, at most %d", ErrTooLarge, len(data), maxEntryBytes)
	}
	f := g.raft.Apply(data, 0)
	if err := f.Error(); err != nil {
		return nil, g.leaderError(err)
	}
	if g.ahead != nil {
		// The leader counted its own copy before fsyncing it
		// (aheadlog.go): answer once it is durable too.
		if err := g.ahead.waitDurable(g.ctx, f.Index()); err != nil {
			if g.ctx.Err() != nil {
				return nil, ErrGroupClosed
			}
			return nil, err
		}
	}
	switch r := f.Response().(type) {
	case []*partitionpb.Result:
		return r, nil
	case error:
		return nil, r
	default:
		return nil, fmt.Errorf("node: group %d: unexpected apply response %T", g.id, r)
	}
}
