package frontend

import (
	"context"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The $management operations (shared/sdk-compat.md 7). Each runs on its own
// goroutine: it waits for a partition, and the engine's goroutine must not.

const managementTimeout = 30 * time.Second

// serveManagement answers <entity>/$management requests.
func (c *conn) serveManagement(entityPath string, req *rpcRequest) {
	e, sub, err := c.lookup(entityPath)
	if err != nil {
		req.fail(failNotFound, entityPath)
		return
	}
	body, _ := req.msg.Value.(amqp.Map)
	q := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if sub != "" {
		q = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	var op func(context.Context, *placementpb.Entity, partitionpb.SubQueue, amqp.Map, *rpcRequest)
	switch req.operation {
	case "com.microsoft:renew-lock":
		op = c.renewLock
	case "com.microsoft:update-disposition":
		op = c.updateDisposition
	default:
		req.fail(failNotImpl, "$management operation "+req.operation)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), managementTimeout)
		defer cancel()
		op(ctx, e, q, body, req)
	}()
}

// lockTokens reads the lock-tokens field: an array of uuids.
func lockTokens(body amqp.Map) ([][]byte, bool) {
	v, _ := body.Get("lock-tokens")
	var tokens [][]byte
	switch ts := v.(type) {
	case []amqp.UUID:
		for _, t := range ts {
			tokens = append(tokens, append([]byte(nil), t[:]...))
		}
	case amqp.UUID:
		tokens = append(tokens, append([]byte(nil), ts[:]...))
	default:
		return nil, false
	}
	return tokens, len(tokens) > 0
}

// renewLock: lock-tokens → 200 {expirations: array of timestamps}, one per
// token in order; 410 if any lock is lost.
func (c *conn) renewLock(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	tokens, ok := lockTokens(body)
	if !ok {
		req.fail(failInvalid, "renew-lock needs lock-tokens")
		return
	}
	expirations := make([]time.Time, len(tokens))
	// Tokens of one partition renew together; keep each answer in its
	// token's place.
	byPartition := map[uint32][]int{}
	for i, t := range tokens {
		p := partitionOfToken(t)
		byPartition[p] = append(byPartition[p], i)
	}
	for p, idx := range byPartition {
		rl := &partitionpb.RenewLocks{Partition: p, SubQueue: q}
		for _, i := range idx {
			rl.LockTokens = append(rl.LockTokens, tokens[i])
		}
		res, err := c.srv.cfg.Backend.RenewLocks(ctx, e, rl)
		if err != nil {
			req.fail(errFailure(err), "")
			return
		}
		if f, failed := resultFailure(res.GetCode()); failed {
			req.fail(f, res.GetDescription())
			return
		}
		for j, i := range idx {
			if j < len(res.LockedUntilMs) {
				expirations[i] = time.UnixMilli(res.LockedUntilMs[j]).UTC()
			}
		}
	}
	req.respond(200, "OK", amqp.Map{{Key: "expirations", Value: expirations}})
}

// updateDisposition settles by lock token: what the SDK falls back to when
// its receive link is gone, and how a lock is settled from any connection
// (locks belong to the entity).
func (c *conn) updateDisposition(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	tokens, ok := lockTokens(body)
	if !ok {
		req.fail(failInvalid, "update-disposition needs lock-tokens")
		return
	}
	status, _ := body.Get("disposition-status")
	var d partitionpb.Disposition
	switch status {
	case "completed":
		d = partitionpb.Disposition_DISPOSITION_COMPLETE
	case "abandoned":
		d = partitionpb.Disposition_DISPOSITION_ABANDON
	case "suspended":
		d = partitionpb.Disposition_DISPOSITION_DEAD_LETTER
	case "defered", "deferred": // the SDKs spell it "defered"
		d = partitionpb.Disposition_DISPOSITION_DEFER
	default:
		req.fail(failInvalid, "unknown disposition-status")
		return
	}
	tmpl := &partitionpb.Settle{SubQueue: q, Disposition: d}
	if v, ok := body.Get("deadletter-reason"); ok {
		tmpl.DeadLetterReason, _ = v.(string)
	}
	if v, ok := body.Get("deadletter-description"); ok {
		tmpl.DeadLetterDescription, _ = v.(string)
	}
	if v, ok := body.Get("properties-to-modify"); ok {
		if m, ok := v.(amqp.Map); ok && len(m) > 0 {
			if enc, err := (&amqp.Message{ApplicationProperties: m}).Append(nil); err == nil {
				tmpl.PropertiesToModify = enc
			}
		}
	}
	byPartition := map[uint32][][]byte{}
	for _, t := range tokens {
		p := partitionOfToken(t)
		byPartition[p] = append(byPartition[p], t)
	}
	for p, ts := range byPartition {
		s := &partitionpb.Settle{
			Partition: p, SubQueue: q, LockTokens: ts, Disposition: d,
			DeadLetterReason: tmpl.DeadLetterReason, DeadLetterDescription: tmpl.DeadLetterDescription,
			PropertiesToModify: tmpl.PropertiesToModify,
		}
		res, err := c.srv.cfg.Backend.Settle(ctx, e, s)
		if err != nil {
			req.fail(errFailure(err), "")
			return
		}
		if f, failed := resultFailure(res.GetCode()); failed {
			req.fail(f, res.GetDescription())
			return
		}
	}
	req.respond(200, "OK", nil)
}
