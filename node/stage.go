package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Sends larger than an entry.
//
// A Service Bus message may be 100 MB, and a batch of messages as large,
// but an entry is at most maxEntryBytes. The leader therefore stages the
// bare message of every large message of a send (and, if the send is
// still too large, of its largest messages until it fits) as a blob of
// StageBody chunks, proposed stagesInFlight at a time, and then proposes
// the Enqueue naming the blobs (partition/blobs.go). A send that fails
// midway leaves blobs behind that no Enqueue names; the partition prunes
// them. A send repeated under its request id stages its blobs again (the
// first attempt's may have been pruned), and the partition drops the new
// ones if the Enqueue was applied before.
const (
	// stageThreshold: a bare message larger than this is always staged,
	// so that an entry holds at most a few large messages.
	stageThreshold = 1 << 20
	// stageChunkBytes is the data of one StageBody: small enough that a
	// chunk's entry stays in the log cache (a quarter of its bytes).
	stageChunkBytes = 1 << 20
	stagesInFlight  = maxInFlight
	// sendHeadroom is left in a request for the Enqueue's other fields.
	sendHeadroom = 64 << 10
	// messageFraming bounds what a NewMessage's tags, lengths and numbers
	// add to its bytes.
	messageFraming = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stageLarge returns the Enqueue to propose for enq: enq itself if it fits
// one request, else a copy whose large bare messages were staged. A
// rejection by the partition (the entity is gone or disabled) is returned
// as its Result. enq is not changed: a caller may send it again.
func (g *group) stageLarge(ctx context.Context, enq *partitionpb.Enqueue) (*partitionpb.Enqueue, *partitionpb.Result, error) {
	stage := chooseStaged(enq)
	if len(stage) == 0 {
		return enq, nil, nil
	}
	out := &partitionpb.Enqueue{EntityId: enq.EntityId, Partition: enq.Partition, Messages: slices.Clone(enq.Messages)}
	var chunks []*partitionpb.Command
	for _, i := range stage {
		nm := enq.Messages[i]
		blob := make([]byte, partition.BlobIDBytes)
		rand.Read(blob)
		for off := 0; off < len(nm.Bare); off += stageChunkBytes {
			chunks = append(chunks, &partitionpb.Command{Op: &partitionpb.Command_StageBody{StageBody: &partitionpb.StageBody{
				EntityId: enq.EntityId, Partition: enq.Partition, Blob: blob, Offset: uint64(off),
				Data: nm.Bare[off:min(off+stageChunkBytes, len(nm.Bare))],
			}}})
		}
		out.Messages[i] = &partitionpb.NewMessage{
			MessageId: nm.MessageId, SessionId: nm.SessionId, PartitionKey: nm.PartitionKey,
			TtlMs: nm.TtlMs, ScheduledEnqueueTimeMs: nm.ScheduledEnqueueTimeMs,
			Header: nm.Header, Annotations: nm.Annotations,
			StagedBody: blob, StagedLength: uint64(len(nm.Bare)), StagedCrc: crc32.Checksum(nm.Bare, castagnoli),
			// What a topic's rules read, and a forwarded message's
			// origin: the message's, staged or not.
			FilterView: nm.FilterView, Forwarded: nm.Forwarded,
		}
	}
	rejected, err := g.proposeChunks(ctx, chunks)
	if err != nil || rejected != nil {
		return nil, rejected, err
	}
	return out, nil, nil
}

// chooseStaged returns the indexes of the messages of enq to stage: every
// message above stageThreshold, then the largest others until the rest
// fits one request. It counts the messages' bytes and a generous framing
// rather than marshal-sizing every send (the proposer still checks the
// exact size of what it is given).
func chooseStaged(enq *partitionpb.Enqueue) []int {
	rest := 0
	for _, m := range enq.Messages {
		rest += len(m.Header) + len(m.Annotations) + len(m.Bare) + len(m.MessageId) + len(m.SessionId) + len(m.PartitionKey) + messageFraming
	}
	var stage, others []int
	for i, m := range enq.Messages {
		if len(m.Bare) > stageThreshold {
			stage = append(stage, i)
			rest -= len(m.Bare)
		} else {
			others = append(others, i)
		}
	}
	if rest <= maxRequestBytes-sendHeadroom {
		return stage
	}
	slices.SortFunc(others, func(a, b int) int { return cmp.Compare(len(enq.Messages[b].Bare), len(enq.Messages[a].Bare)) })
	for _, i := range others {
		if rest <= maxRequestBytes-sendHeadroom || len(enq.Messages[i].Bare) == 0 {
			break
		}
		stage = append(stage, i)
		rest -= len(enq.Messages[i].Bare)
	}
	return stage
}

// proposeChunks proposes the StageBody commands, stagesInFlight at a time,
// and returns the first rejection or error.
func (g *group) proposeChunks(ctx context.Context, chunks []*partitionpb.Command) (*partitionpb.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		rejected *partitionpb.Result
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(r *partitionpb.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		if rejected == nil && firstErr == nil {
			rejected, firstErr = r, err
			cancel()
		}
	}
	slots := make(chan struct{}, stagesInFlight)
	for _, c := range chunks {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			res, err := g.propose1(ctx, c)
			switch {
			case err != nil:
				fail(nil, err)
			case res.Code != partitionpb.ResultCode_RESULT_OK:
				fail(res, nil)
			}
		}()
	}
	wg.Wait()
	if rejected == nil && firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, fmt.Errorf("node: group %d: staging a large send: %w", g.id, firstErr)
	}
	return rejected, nil
}
