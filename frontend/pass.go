package frontend

import (
	"cmp"
	"slices"
	"sync"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// concentratedAsk is the least a pass asks of one partition while some
// partition of the entity is backlogged. Every ask that finds messages is
// a Raft entry of the partition's group (a lock now, a settle of what it
// took later), fsynced by three replicas, and that cost hardly depends on
// how many messages the entry carries: a credit spread thin over every
// partition cost a multiple of a plain queue's CPU per message. A plain
// queue's pass takes the whole credit in one entry, so a partitioned pass
// asks as few partitions as the credit allows. It exceeds the credit
// consumers commonly give (the SDKs' prefetch, the load tool's 1,000), so
// that such a pass asks one partition, as a plain queue's does: at 512 a
// credit of 1,000 made two asks, and four receivers draining sent 16.4
// requests per 1,000 messages against 14.8.
const concentratedAsk = 2048

// pass takes what credit allows from the partitions without waiting and
// returns how many messages it delivered. It asks in rounds, the
// partitions of a round at once, each partition once a pass, from a start
// that moves on by one partition every pass:
//
//   - The first round gives the credit in portions from the start on:
//     while some partition is backlogged (it filled its latest ask), the
//     portion is at least concentratedAsk, so that a draining receiver asks
//     few partitions a pass, in turn; otherwise each partition's share of
//     the credit, ceil(credit/partitions), so that messages spread thin
//     arrive in one round.
//   - While credit is left (asked partitions had less than their portion),
//     the next round gives it to the backlogged partitions not asked yet,
//     or, when none is left, spreads it over all those not asked yet: no
//     partition with messages waits while the receiver has credit. The
//     least portion halves every round, so that backlogs shallower than
//     concentratedAsk cost a few rounds, not one a partition.
//   - The credit still left goes to the partitions that filled their ask,
//     one after another.
//
// A partition that always has messages thus takes no more than its
// portion while another has some, and each partition starts a pass once
// every `partitions` passes of the receiver (or, with several receivers of
// the entity on this front-end, of theirs: passRotation): when one took all the credit, the others'
// messages waited as long as it had any (a receiver of credit 10 with
// partition 0 never empty got nothing of partition 5). The caller
// long-polls when a pass found nothing.
func (r *receiver) pass(base, partitions, credit uint32) int {
	if len(r.backlogged) != int(partitions) {
		r.backlogged = make([]bool, partitions)
	}
	start := r.passStart(partitions)
	order := r.partitionOrder(partitions)
	rest := make([]uint32, partitions) // offsets from base not asked yet, in asking order
	for i := range rest {
		rest[i] = order[(start+uint32(i))%partitions]
	}
	got := 0
	var filled []uint32 // offsets of the partitions that filled their ask
	round := func(offsets []uint32, portion uint32) {
		asks, shares := portions(offsets, credit, portion)
		for i, res := range r.receiveAll(base, asks, shares) {
			n := 0
			if res != nil {
				n = r.hand(res, shares[i])
			}
			got += n
			credit -= uint32(n)
			r.backlogged[asks[i]] = uint32(n) == shares[i]
			if r.backlogged[asks[i]] {
				filled = append(filled, asks[i])
			}
		}
		rest = slices.DeleteFunc(rest, func(p uint32) bool { return slices.Contains(asks, p) })
	}
	spread := func(n int) uint32 { return (credit + uint32(n) - 1) / uint32(n) }
	floor := uint32(0) // the least a round asks of a partition
	if slices.Contains(r.backlogged, true) {
		floor = concentratedAsk
	}
	round(rest, max(spread(len(rest)), floor))
	for credit > 0 && len(rest) > 0 && len(r.held) == 0 && r.ctx.Err() == nil {
		// Partitions had less than they were asked: backlogs may be
		// shallow, and each round is a round trip.
		floor /= 2
		if hot := slices.DeleteFunc(slices.Clone(rest), func(p uint32) bool { return !r.backlogged[p] }); len(hot) > 0 {
			round(hot, max(spread(len(hot)), floor))
		} else {
			round(rest, spread(len(rest)))
		}
	}
	for _, p := range filled {
		if credit == 0 || len(r.held) > 0 || r.ctx.Err() != nil {
			break
		}
		ask := credit
		n := r.fetch(base+p, ask, 0)
		got += n
		credit -= uint32(n)
		r.backlogged[p] = uint32(n) == ask
	}
	return got
}

// partitionOrder is the order in which passes go round the partitions:
// those of one group one after another (in partition order within it,
// the groups in the order of their first partition), so that a pass that
// moves on from a partition usually stays in its group, where its locks
// share Raft entries with the settles of what the pass before took.
// Going round in partition order, every step changed group (partitions
// spread round-robin over groups), and four receivers' settles and locks
// split over two groups packed into 8.5 entries per 1,000 messages
// where one group made 5.3.
func (r *receiver) partitionOrder(partitions uint32) []uint32 {
	if uint32(len(r.order)) == partitions {
		return r.order
	}
	groups := r.entity.GetPartitionGroups()
	r.order = make([]uint32, partitions)
	for i := range r.order {
		r.order[i] = uint32(i)
	}
	if len(groups) == int(partitions) {
		first := map[uint64]int{} // a group's first partition
		for i, g := range groups {
			if _, ok := first[g]; !ok {
				first[g] = i
			}
		}
		slices.SortStableFunc(r.order, func(a, b uint32) int {
			return cmp.Compare(first[groups[a]], first[groups[b]])
		})
	}
	return r.order
}

// portions gives credit to offsets in order, at most portion each, and
// returns the partitions asked and how much of each.
func portions(offsets []uint32, credit, portion uint32) (asks, shares []uint32) {
	for _, p := range offsets {
		if credit == 0 {
			break
		}
		n := min(portion, credit)
		asks, shares = append(asks, p), append(shares, n)
		credit -= n
	}
	return asks, shares
}

// receiveAll takes up to shares[i] messages of each partition
// base+offsets[i], the partitions at once, and returns their results (nil:
// nothing to hand out).
func (r *receiver) receiveAll(base uint32, offsets, shares []uint32) []*partitionpb.Result {
	results := make([]*partitionpb.Result, len(offsets))
	if len(offsets) == 1 {
		results[0] = r.receive(base+offsets[0], shares[0], 0)
		return results
	}
	var wg sync.WaitGroup
	for i := range offsets {
		wg.Go(func() { results[i] = r.receive(base+offsets[i], shares[i], 0) })
	}
	wg.Wait()
	return results
}

// passStart is the partition r's next pass starts at.
func (r *receiver) passStart(partitions uint32) uint32 {
	if r.rotation != nil {
		return r.rotation.next(r, partitions)
	}
	s := r.nextStart % partitions
	r.nextStart++
	return s
}

// passRotation is where the passes of a front-end's receivers of one
// entity (or of its dead-letter queue) start: at one partition, until a
// receiver that began a pass there begins another, which moves it on by
// one. A lone receiver thus starts each pass one partition further, and
// concurrent receivers start theirs at the same partition, so that their
// locks, and later their settles, reach one group together and share its
// Raft entries: each receiver rotating on its own, four receivers' asks
// went to as many groups as receivers, one entry per request (16-18
// entries per 1,000 messages against a plain queue's 6).
type passRotation struct {
	mu    sync.Mutex
	start uint32
	begun []*receiver // the receivers that began a pass at start
}

// next returns the start of r's next pass.
func (p *passRotation) next(r *receiver, partitions uint32) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.begun, r) {
		p.start++
		p.begun = p.begun[:0]
	}
	p.begun = append(p.begun, r)
	return p.start % partitions
}

// leave forgets r, which ended.
func (p *passRotation) leave(r *receiver) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.begun = slices.DeleteFunc(p.begun, func(x *receiver) bool { return x == r })
}
