// Package routing finds partition leaders for the front-end: it watches the
// routing table that placement publishes and calls PartitionService on the
// leader of each partition's group, following leader hints and node
// failures so that clients never see a leader change.
package routing

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/groupcall"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// Config configures a Router.
type Config struct {
	// Placement lists gRPC addresses of placement members; any one that
	// answers serves the routing table.
	Placement []string
	Logger    *slog.Logger
	// Creds is the cluster's mutual TLS the router dials nodes with; nil:
	// plain text.
	Creds *rpcnet.Creds
	// DialOptions are added to every gRPC dial, after rpcnet.Dial's.
	DialOptions []grpc.DialOption
	// Local holds the PartitionService of storage nodes in this process,
	// by node id: calls to them are method calls, not gRPC (localClient).
	Local map[string]partitionpb.PartitionServiceServer
	// Rules are authorization rules the front-end trusts besides the
	// catalog's (a deployment's config file, dev mode's emulator rule);
	// on a clash of name and scope they win over the catalog's.
	Rules []sas.Rule
}

// Router implements frontend.Backend.
type Router struct {
	cfg Config
	log *slog.Logger

	mu    sync.RWMutex
	table *table        // nil before the first routing table (table.go)
	ready chan struct{} // closed when the first table arrived
	rules *sas.Ruleset  // Config.Rules and the table's
	// resync: the router missed a change of the table, and takes the
	// next whole table even if it is older than the one it holds.
	resync bool

	// calls follows each group's leader: hints, retries, attempt
	// timeouts (proto/groupcall).
	calls *groupcall.Caller[partitionpb.PartitionServiceClient]
	// health is what the calls saw of each group's leader (health.go).
	health leaderHealth

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // by address

	cancel context.CancelFunc
	done   chan struct{}
}

var (
	_ frontend.Backend    = (*Router)(nil)
	_ frontend.RuleSource = (*Router)(nil)
)

// New returns a Router; Start begins watching routes.
func New(cfg Config) (*Router, error) {
	if len(cfg.Placement) == 0 {
		return nil, errors.New("routing: no placement addresses")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rules, err := sas.NewRuleset(cfg.Rules...)
	if err != nil {
		return nil, fmt.Errorf("routing: %w", err)
	}
	r := &Router{
		cfg:   cfg,
		log:   cfg.Logger,
		rules: rules,
		ready: make(chan struct{}),
		conns: make(map[string]*grpc.ClientConn),
		done:  make(chan struct{}),
	}
	r.calls = groupcall.New(groupcall.Config[partitionpb.PartitionServiceClient]{
		Group:          r.group,
		Addr:           r.nodeAddr,
		Dial:           r.client,
		AttemptTimeout: r.attemptTimeoutOf,
		OnRetry:        func(group uint64, err error) { r.health.noted(group, err, time.Now()) },
	})
	return r, nil
}

// Start watches the routing table in the background.
func (r *Router) Start(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer close(r.done)
		r.watch(ctx)
	}()
}

// Ready is closed once the first routing table has arrived.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// Close stops watching and closes connections.
func (r *Router) Close() error {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	r.connMu.Lock()
	defer r.connMu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
	return nil
}

// watch keeps a WatchRoutes stream open to some placement member.
func (r *Router) watch(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		addr := r.cfg.Placement[i%len(r.cfg.Placement)]
		got, err := r.watchOnce(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = 50 * time.Millisecond
		}
		r.log.Debug("routing table stream ended", "placement", addr, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// watchOnce follows one member's stream, and reports whether it yielded a
// table. Members stream only once their catalog caught up after a start
// (placement/catchup.go), so the first table is never an empty one of a
// member that has not replayed its log yet.
//
// The router asks for changes: a whole table first, then what changed,
// each a few records where a whole table is the namespace. Reconnecting,
// it names the version it holds and gets what changed since (the member
// waits until it has caught up with that version), or a whole table
// when the member no longer remembers that far back.
func (r *Router) watchOnce(ctx context.Context, addr string) (got bool, err error) {
	cc, err := r.conn(addr)
	if err != nil {
		return false, err
	}
	var after, born uint64
	r.mu.RLock()
	if r.table != nil && !r.resync {
		after, born = r.table.version, r.table.born
	}
	r.mu.RUnlock()
	stream, err := placementpb.NewPlacementServiceClient(cc).WatchRoutes(ctx, &placementpb.WatchRoutesRequest{AfterVersion: after, CatalogBornMs: born, Changes: true})
	if err != nil {
		return false, err
	}
	for {
		t, err := stream.Recv()
		if err != nil {
			return got, err
		}
		got = true
		if err := r.install(t); err != nil {
			r.log.Warn("routing table: asking placement for the whole table again", "placement", addr, "err", err)
			return got, err
		}
	}
}

// install takes a whole routing table or applies a change to the one
// held. A change that does not follow the table held (one was missed) is
// not applied: install returns errMissedChange, and the router takes the
// next whole table it is sent, whatever its version.
func (r *Router) install(t *placementpb.RoutingTable) error {
	if t.ChangesFrom != 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.table == nil || r.resync {
			r.resync = true
			return fmt.Errorf("%w: a change from version %d, and no table to apply it to", errMissedChange, t.ChangesFrom)
		}
		if err := r.table.apply(t); err != nil {
			r.resync = true
			return err
		}
		if t.AuthorizationRulesChanged {
			r.rules = r.ruleset(t.AuthorizationRules)
		}
		return nil
	}
	tb := newTable(t) // outside the lock: it is the namespace
	rules := r.ruleset(t.AuthorizationRules)
	r.mu.Lock()
	if r.table != nil && t.Version < r.table.version && sameCatalog(t.CatalogBornMs, r.table.born) && !r.resync {
		r.mu.Unlock()
		// An older table from a lagging member. One of a catalog born
		// since (the cluster's data wiped and started over) counts its
		// versions from 1 again, and is taken.
		return nil
	}
	first := r.table == nil
	r.table, r.rules, r.resync = tb, rules, false
	r.mu.Unlock()
	if first {
		close(r.ready)
	}
	return nil
}

var _ frontend.FilterCounter = (*Router)(nil)

// Ruleset implements frontend.RuleSource: the configured rules and the
// catalog's as of the latest routing table.
func (r *Router) Ruleset() *sas.Ruleset {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.rules
}

// ruleset joins the configured rules and the catalog's. A catalog rule
// that clashes with a configured one, or that this version cannot use, is
// left out (and named in the log, never its keys).
func (r *Router) ruleset(catalog []*placementpb.AuthorizationRule) *sas.Ruleset {
	key := func(r sas.Rule) [2]string {
		return [2]string{strings.ToLower(r.Name), strings.ToLower(strings.Trim(r.Entity, "/"))}
	}
	rules := slices.Clone(r.cfg.Rules)
	seen := make(map[[2]string]bool, len(rules)+len(catalog))
	for _, rule := range rules {
		seen[key(rule)] = true
	}
	for _, c := range catalog {
		rule := sas.Rule{Name: c.Name, Entity: c.Entity, Rights: sas.Rights(c.Rights), PrimaryKey: c.PrimaryKey, SecondaryKey: c.SecondaryKey}
		err := rule.Check()
		if err == nil && seen[key(rule)] {
			err = errors.New("a configured rule has its name and scope")
		}
		if err != nil {
			r.log.Warn("authorization rule of the catalog left out", "rule", rule.String(), "err", err)
			continue
		}
		seen[key(rule)] = true
		rules = append(rules, rule)
	}
	rs, err := sas.NewRuleset(rules...)
	if err != nil { // cannot happen: every rule was checked with the others
		r.log.Error("authorization rules", "err", err)
		return r.rules
	}
	return rs
}

// lookupTimeout bounds asking placement for an entity the routing table
// does not have yet.
const lookupTimeout = 3 * time.Second

// Entity implements frontend.Backend. The routing table arrives a moment
// after a change, so an entity created just now may be missing from it:
// before answering not-found the router asks placement, which answers from
// the committed catalog, so that an entity is usable as soon as its
// creation returned. Only placement's NOT_FOUND is not-found: clients take
// it as final, so any other failure (no member reachable, no meta leader,
// a member still replaying its catalog after a restart) is
// ErrCatalogUnavailable, which they retry.
func (r *Router) Entity(name string) (*placementpb.Entity, error) {
	key := strings.ToLower(name)
	r.mu.RLock()
	var e *placementpb.Entity
	if r.table != nil {
		e = r.table.byName[key]
	}
	r.mu.RUnlock()
	if e != nil {
		return e, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var lastErr error
	for _, addr := range r.cfg.Placement {
		cc, err := r.conn(addr)
		if err != nil {
			lastErr = err
			continue
		}
		e, err = placementpb.NewPlacementServiceClient(cc).GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("%w: %s", frontend.ErrEntityNotFound, name)
		}
		if err != nil {
			lastErr = err
			continue
		}
		r.mu.Lock()
		if r.table != nil && r.table.byName[key] == nil {
			r.table.put(e) // until a table or a change replaces it
		}
		r.mu.Unlock()
		return e, nil
	}
	return nil, fmt.Errorf("%w: looking up %s: %v", frontend.ErrCatalogUnavailable, name, lastErr)
}

// Filters implements frontend.FilterCounter: the rules of every
// subscription of topic, as of the latest routing table (each is a filter
// a message sent to the topic is evaluated against).
func (r *Router) Filters(topic string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.table == nil {
		return 0
	}
	return r.table.filters[strings.ToLower(topic)]
}

// HasEntity reports whether the current routing table names an entity,
// without asking placement.
func (r *Router) HasEntity(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.table != nil && r.table.byName[strings.ToLower(name)] != nil
}

// Send implements frontend.Backend. Every attempt carries the same request
// id, so that the partition applies a send it cannot tell was applied only
// once (partition/requests.go).
func (r *Router) Send(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	return r.send(ctx, e, partition, msgs, false)
}

// send is Send, and with once SendOnce (health.go).
func (r *Router) send(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage, once bool) (*partitionpb.Result, error) {
	if int(partition) >= len(e.PartitionGroups) {
		return nil, fmt.Errorf("%w: partition %d of %s", frontend.ErrEntityNotFound, partition, e.Name)
	}
	id := newRequestID()
	size := 0
	for _, m := range msgs {
		size += len(m.Bare)
	}
	var res *partitionpb.Result
	err := r.callGroup(ctx, e.PartitionGroups[partition], func() bool { return r.names(e) }, groupcall.CallOptions{Extra: carryTime(size), OneRound: once},
		resultInto(r, e, &res, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
			return c.Send(ctx, &partitionpb.SendRequest{GroupId: group, EntityId: e.Id, Partition: partition, Messages: msgs, RequestId: id})
		}))
	return res, err
}

// remainingWait is what is left of a long-poll's wait at deadline, for an
// attempt after a leader change: a retry waits out the caller's time, not
// the whole wait again (an accept-next must answer before the client's
// com.microsoft:timeout). 0 when the request did not wait.
func remainingWait(deadline time.Time, waitMs int64) int64 {
	if waitMs <= 0 {
		return waitMs
	}
	return max(time.Until(deadline).Milliseconds(), 0)
}

// newRequestID returns 16 random bytes: unique enough among the requests
// a partition remembers (two minutes' worth).
func newRequestID() []byte {
	id := make([]byte, 16)
	_, _ = crand.Read(id) // never fails (crypto/rand)
	return id
}

// Receive implements frontend.Backend. A peek-lock receive carries a
// request id, the same on every attempt, and later attempts say they
// repeat: a Lock whose answer was lost (its leader lost the term after
// proposing it, an attempt timed out) then answers the retry with the
// messages it locked, instead of leaving them locked for nobody until
// their locks expire.
func (r *Router) Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	var id []byte
	if !req.ReceiveAndDelete {
		id = newRequestID()
	}
	attempts := 0
	wait := time.Duration(req.WaitMs) * time.Millisecond
	deadline := time.Now().Add(wait)
	return callResult(r, ctx, e, req.Partition, wait, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		rq := proto.Clone(req).(*partitionpb.ReceiveRequest)
		rq.GroupId, rq.EntityId = group, e.Id
		rq.WaitMs = remainingWait(deadline, req.WaitMs)
		rq.RequestId, rq.Repeat = id, attempts > 0
		attempts++
		return c.Receive(ctx, rq)
	})
}

// Settle implements frontend.Backend.
func (r *Router) Settle(ctx context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error) {
	s.EntityId = e.Id
	id := newRequestID() // as Send's
	return callResult(r, ctx, e, s.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.Settle(ctx, &partitionpb.SettleRequest{GroupId: group, Settle: s, RequestId: id})
	})
}

// RenewLocks implements frontend.Backend.
func (r *Router) RenewLocks(ctx context.Context, e *placementpb.Entity, rl *partitionpb.RenewLocks) (*partitionpb.Result, error) {
	rl.EntityId = e.Id
	return callResult(r, ctx, e, rl.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.RenewLocks(ctx, &partitionpb.RenewLocksRequest{GroupId: group, Renew: rl})
	})
}

// Peek implements frontend.Backend.
func (r *Router) Peek(ctx context.Context, e *placementpb.Entity, req *partitionpb.PeekRequest) ([]*partitionpb.Message, error) {
	var msgs []*partitionpb.Message
	err := r.call(ctx, e, req.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		rq := proto.Clone(req).(*partitionpb.PeekRequest)
		rq.GroupId, rq.EntityId = group, e.Id
		resp, err := c.Peek(ctx, rq)
		msgs = resp.GetMessages()
		return err
	})
	return msgs, err
}

// Stats reads one entity partition's counters from its group's leader
// (the gateway's runtime counts and metrics).
func (r *Router) Stats(ctx context.Context, e *placementpb.Entity, partition uint32) (*partitionpb.StatsResponse, error) {
	var resp *partitionpb.StatsResponse
	err := r.call(ctx, e, partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		var err error
		resp, err = c.Stats(ctx, &partitionpb.StatsRequest{GroupId: group, EntityId: e.Id, Partition: partition})
		return err
	})
	return resp, err
}

// GroupStats reads the counters of the named entity partitions of a group
// (all it hosts when refs is empty) from its leader in one call: the
// gateway's lists and scrapes, which would otherwise wait for one
// confirmation of leadership per entity partition.
func (r *Router) GroupStats(ctx context.Context, group uint64, refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error) {
	var out []*partitionpb.EntityPartitionStats
	err := r.callGroup(ctx, group, func() bool { return r.hasGroup(group) }, groupcall.CallOptions{}, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		resp, err := c.GroupStats(ctx, &partitionpb.GroupStatsRequest{GroupId: group, Entities: refs})
		out = resp.GetEntities()
		return err
	})
	return out, err
}

// hasGroup reports whether the routing table names the group.
func (r *Router) hasGroup(group uint64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.table != nil && r.table.groups[group] != nil
}

// CancelScheduled implements frontend.Backend.
func (r *Router) CancelScheduled(ctx context.Context, e *placementpb.Entity, cs *partitionpb.CancelScheduled) (*partitionpb.Result, error) {
	cs.EntityId = e.Id
	return callResult(r, ctx, e, cs.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.CancelScheduled(ctx, &partitionpb.CancelScheduledRequest{GroupId: group, Cancel: cs})
	})
}

// ReceiveDeferred implements frontend.Backend. A peek-lock receive
// carries a request id, as Receive's does: a retry after a lost answer
// gets the messages its first attempt locked rather than "not found".
func (r *Router) ReceiveDeferred(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveDeferredRequest) (*partitionpb.Result, error) {
	var id []byte
	if !req.ReceiveAndDelete {
		id = newRequestID()
	}
	return callResult(r, ctx, e, req.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		rq := proto.Clone(req).(*partitionpb.ReceiveDeferredRequest)
		rq.GroupId, rq.EntityId, rq.RequestId = group, e.Id, id
		return c.ReceiveDeferred(ctx, rq)
	})
}

// resultOf is every PartitionService response that carries a Result.
type resultOf interface{ GetResult() *partitionpb.Result }

// callResult runs op through call and returns the Result of its response.
func callResult(r *Router, ctx context.Context, e *placementpb.Entity, partition uint32, extra time.Duration, op func(context.Context, partitionpb.PartitionServiceClient, uint64) (resultOf, error)) (*partitionpb.Result, error) {
	var res *partitionpb.Result
	err := r.call(ctx, e, partition, extra, resultInto(r, e, &res, op))
	return res, err
}

// resultInto is the attempt of a call whose response carries a Result:
// op's, stored in *res.
func resultInto(r *Router, e *placementpb.Entity, res **partitionpb.Result, op func(context.Context, partitionpb.PartitionServiceClient, uint64) (resultOf, error)) func(context.Context, partitionpb.PartitionServiceClient, uint64) error {
	return func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		resp, err := op(ctx, c, group)
		if err != nil {
			return err
		}
		*res = resp.GetResult()
		if (*res).GetCode() == partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND && r.names(e) {
			// The partition does not know an entity the catalog has: it
			// was created a moment ago and its partition is still being
			// configured (or the group is new). Nothing was applied;
			// call retries while the table names the entity.
			return status.Error(codes.NotFound, (*res).GetDescription())
		}
		return nil
	}
}

// maxPartitionMessage bounds one PartitionService request or response.
const maxPartitionMessage = 256 << 20

// attemptTimeout bounds one try against a node in another process, so
// that a node that does not answer (dead, paused, cut off) costs a retry
// rather than the caller's whole deadline. A node in this process (dev)
// cannot be cut off from its front-end, and a slow one is better waited
// for than sent the request again, so its attempts get the whole deadline.
const attemptTimeout = 3 * time.Second

// carryTime is how much longer than attemptTimeout a send of size bytes
// may take: its bytes go to the leader, into its log and to a quorum's
// disks, and a retry would carry them all again. At 1 MiB/s, far less
// than a node does, a request of 256 KiB gets a quarter of a second more
// and one of 10 MB ten seconds.
func carryTime(size int) time.Duration {
	return time.Duration(size) * time.Second / (1 << 20)
}

// call runs op against the leader of the partition's group, retrying on
// other replicas and after leader hints until ctx ends. An attempt at a
// remote node may take attemptTimeout and extra more: a long-poll's wait,
// or the time to carry a large request.
func (r *Router) call(ctx context.Context, e *placementpb.Entity, partition uint32, extra time.Duration, op func(context.Context, partitionpb.PartitionServiceClient, uint64) error) error {
	if int(partition) >= len(e.PartitionGroups) {
		return fmt.Errorf("%w: partition %d of %s", frontend.ErrEntityNotFound, partition, e.Name)
	}
	return r.callGroup(ctx, e.PartitionGroups[partition], func() bool { return r.names(e) }, groupcall.CallOptions{Extra: extra}, op)
}

// callGroup is call for a group: known tells whether a NOT_FOUND answer
// (a node that does not host the group, a partition that does not know
// the entity yet) is worth another try: while it holds, call retries.
// groupcall follows the leader (Router.calls); the answers that end a
// call become the front-end's errors here.
func (r *Router) callGroup(ctx context.Context, group uint64, known func() bool, o groupcall.CallOptions, op func(context.Context, partitionpb.PartitionServiceClient, uint64) error) error {
	// The node does not host the group, or the partition does not know
	// the entity. Both happen for a while after a creation returned
	// (placement waits a bounded time for the groups to configure their
	// partitions, and under load they take longer) and while a routing
	// table is stale. Until the table stops naming the entity, try again.
	o.RetryNotFound = func(*status.Status) bool { return known() }
	err := r.calls.Call(ctx, group, o, func(ctx context.Context, c partitionpb.PartitionServiceClient) error {
		return op(ctx, c, group)
	})
	r.health.noted(group, err, time.Now())
	if err == nil {
		return nil
	}
	var gaveUp *groupcall.GaveUp
	if errors.As(err, &gaveUp) {
		return fmt.Errorf("%w: group %d: %v", frontend.ErrUnavailable, group, gaveUp.Last)
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.NotFound: // and the table no longer names the entity
		return fmt.Errorf("%w: %v", frontend.ErrEntityNotFound, err)
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %v", frontend.ErrInvalid, err)
	case codes.ResourceExhausted:
		// The node's disk (node.ErrNoSpace, whose text this looks for),
		// its proposal queue (node.ErrBusy), or else a rule of the
		// entity, which carries a partition Result, or gRPC's own
		// message size limit.
		if !groupcall.HasResult(st) && strings.Contains(st.Message(), noSpaceText) {
			return fmt.Errorf("%w: %v", frontend.ErrStorageFull, err)
		}
		if !groupcall.HasResult(st) && strings.Contains(st.Message(), busyText) {
			return fmt.Errorf("%w: %v", frontend.ErrServerBusy, err)
		}
	}
	return err
}

// noSpaceText is in the message of node.ErrNoSpace; the router may not
// import node (tests/arch).
const noSpaceText = "no space left"

// busyText is in the message of node.ErrBusy: the leader's proposal
// queue was full and the send was not proposed.
const busyText = "proposal queue full"

// names reports whether the routing table still holds entity e.
func (r *Router) names(e *placementpb.Entity) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.table == nil {
		return false
	}
	x := r.table.byName[strings.ToLower(e.Name)]
	return x != nil && x.Id == e.Id
}

// group returns the routing table's record of a group (nil when it has
// none): its replicas and the leader it last reported.
func (r *Router) group(id uint64) *placementpb.Group {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.table == nil {
		return nil
	}
	return r.table.groups[id]
}

// nodeAddr returns a node's gRPC address as the routing table has it.
func (r *Router) nodeAddr(id string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.table == nil {
		return ""
	}
	if n := r.table.nodes[id]; n != nil {
		return n.GrpcAddr
	}
	return ""
}

// attemptTimeoutOf is groupcall's AttemptTimeout: attemptTimeout for a
// node in another process, none for one in this process.
func (r *Router) attemptTimeoutOf(nodeID string) time.Duration {
	if r.cfg.Local[nodeID] != nil {
		return 0
	}
	return attemptTimeout
}

// client returns the way to call a node: directly if it runs in this
// process, else over gRPC.
func (r *Router) client(nodeID, addr string) (partitionpb.PartitionServiceClient, error) {
	if s := r.cfg.Local[nodeID]; s != nil {
		return localClient{s}, nil
	}
	cc, err := r.conn(addr)
	if err != nil {
		return nil, err
	}
	return partitionpb.NewPartitionServiceClient(cc), nil
}

func (r *Router) conn(addr string) (*grpc.ClientConn, error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.conns == nil {
		return nil, errors.New("routing: closed")
	}
	if c := r.conns[addr]; c != nil {
		return c, nil
	}
	opts := append([]grpc.DialOption{
		// A receive may carry a message of up to 100 MB (gRPC's default
		// limit is 4 MB).
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPartitionMessage), grpc.MaxCallSendMsgSize(maxPartitionMessage)),
	}, r.cfg.DialOptions...)
	// rpcnet.Dial's keepalive notices a node that stops answering
	// without closing the connection within 15 s: the routing-table
	// stream moves to another placement member, and calls in flight fail
	// and are retried.
	c, err := rpcnet.Dial(addr, r.cfg.Creds, opts...)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}
