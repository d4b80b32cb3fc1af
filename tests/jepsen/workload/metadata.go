package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// MetadataConfig drives the placement catalog: create, delete and get of
// a few queue names through PlacementService, each client on its own
// node (which forwards to the meta group's leader).
type MetadataConfig struct {
	Placement Placement
	Rec       *history.Recorder
	Clients   int
	Names     []string
	Interval  time.Duration // between one client's operations
	OpTimeout time.Duration
	Seed      uint64
	// Generation, when set, moves the clients to fresh names (suffixed
	// -g1, -g2, ...) each time it passes. Porcupine checks each name on
	// its own, and a create or delete of unknown outcome stays open to
	// the end of its name's history, so short histories per name keep
	// the search small over an hours-long soak.
	Generation time.Duration
}

// MetadataEntity is the history's Entity of every metadata operation.
const MetadataEntity = "$catalog"

// Metadata is a running metadata workload.
type Metadata struct {
	wg     sync.WaitGroup
	cancel context.CancelFunc
	start  time.Time
}

// StartMetadata starts the clients. An ok records what the catalog
// answered in Attrs["result"]: created or exists for a create, deleted
// or absent for a delete, found or absent for a get. A create or delete
// whose answer did not come is info (it may have happened); a get that
// fails had no effect and is fail.
func StartMetadata(ctx context.Context, cfg MetadataConfig) *Metadata {
	ctx, cancel := context.WithCancel(ctx)
	md := &Metadata{cancel: cancel, start: time.Now()}
	for i := range cfg.Clients {
		p := 700 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		md.wg.Add(1)
		go func() { defer md.wg.Done(); md.client(ctx, cfg, p, i%len(cfg.Placement.Addrs), rng) }()
	}
	return md
}

// Stop ends the clients and waits for their last operations.
func (md *Metadata) Stop() {
	md.cancel()
	md.wg.Wait()
}

// catalogOp is one drawn operation of a catalog client: the attributes
// its invoke and completion carry, the call, and how its error reads.
type catalogOp struct {
	f       string
	attrs   func() map[string]string
	call    func(ctx context.Context, c placementpb.PlacementServiceClient) error
	outcome func(err error) (history.Type, string)
}

// run is one catalog client: it draws an operation for a name of the
// current generation, records it under entity, and moves to another node
// after any answer but ok (this one may be cut off or down).
func (md *Metadata) run(ctx context.Context, cfg MetadataConfig, p, node int, entity string, draw func(name string) catalogOp, rng *rand.Rand) {
	var c placementpb.PlacementServiceClient
	closeFn := func() {}
	defer func() { closeFn() }()
	for ctx.Err() == nil {
		if c == nil {
			var err error
			if c, closeFn, err = cfg.Placement.client(node); err != nil {
				c, closeFn = nil, func() {}
				pause(ctx, time.Second)
				continue
			}
		}
		name := cfg.Names[rng.IntN(len(cfg.Names))]
		if cfg.Generation > 0 {
			name = fmt.Sprintf("%s-g%d", name, time.Since(md.start)/cfg.Generation)
		}
		op := draw(name)
		inv := history.Op{Process: p, Type: history.Invoke, F: op.f, Entity: entity, Attrs: op.attrs()}
		cfg.Rec.Add(inv)
		// The call runs to its own timeout even when the run stops, so
		// that its outcome is known whenever the broker answers.
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		err := op.call(octx, c)
		cancel()
		done := inv
		done.Attrs = op.attrs()
		done.Type, done.Attrs[AttrResult] = op.outcome(err)
		if err != nil {
			done.Err = err.Error()
		}
		cfg.Rec.Add(done)
		if done.Type != history.OK {
			closeFn()
			c, closeFn = nil, func() {}
			node = (node + 1) % len(cfg.Placement.Addrs)
		}
		pause(ctx, cfg.Interval)
	}
}

// client draws creates, deletes and gets (twice as often) of queues.
func (md *Metadata) client(ctx context.Context, cfg MetadataConfig, p, node int, rng *rand.Rand) {
	md.run(ctx, cfg, p, node, MetadataEntity, func(name string) catalogOp {
		f := []string{history.Create, history.Delete, history.Get, history.Get}[rng.IntN(4)]
		return catalogOp{f: f,
			attrs: func() map[string]string { return map[string]string{"entity": name} },
			call: func(ctx context.Context, c placementpb.PlacementServiceClient) error {
				var err error
				switch f {
				case history.Create:
					_, err = c.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: name})
				case history.Delete:
					_, err = c.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: name})
				case history.Get:
					_, err = c.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
				}
				return err
			},
			outcome: func(err error) (history.Type, string) { return metadataOutcome(f, err) },
		}
	}, rng)
}

// metadataOutcome maps a call's error to the history: the codes that
// are answers (AlreadyExists, NotFound) are ok with their result;
// InvalidArgument and the like certainly changed nothing (fail); the
// rest leave a create or delete unknown (info).
func metadataOutcome(f string, err error) (history.Type, string) {
	code := status.Code(err)
	switch {
	case err == nil:
		return history.OK, map[string]string{history.Create: "created", history.Delete: "deleted", history.Get: "found"}[f]
	case code == codes.AlreadyExists && f == history.Create:
		return history.OK, "exists"
	case code == codes.NotFound && f != history.Create:
		return history.OK, "absent"
	case f == history.Get, code == codes.InvalidArgument, code == codes.PermissionDenied, code == codes.Unimplemented:
		return history.Fail, ""
	default:
		return history.Info, ""
	}
}

// MetadataNames are n queue names the metadata workload plays with.
func MetadataNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("jepsen-meta-%d", i))
	}
	return out
}
