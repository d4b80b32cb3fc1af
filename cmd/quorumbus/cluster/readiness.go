package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
)

// Readiness means the process can do its part now (docs/operations.md):
//
//   - a front-end: its AMQP listener accepts, it has a routing table from
//     a placement member that caught up with the catalog, and the entities
//     it was told to declare (--config) exist and are in that table;
//   - a storage process: its placement member caught up and knows a meta
//     leader, it has a routing table, and every partition group the table
//     places on it is open, not stopped, and has a leader: a follower
//     forgets its leader when heartbeats stop, and a leader steps down
//     when it has not heard from a majority within its lease, so "a
//     leader is known" means a quorum was reachable a moment ago.

// AMQPListener runs a front-end's accept loop and records how it ended.
// Serve returns only for good (it retries what it can retry), so an error
// other than amqp.ErrServerClosed means the listener is dead: the process
// is unready and should exit (Dead).
type AMQPListener struct {
	addr string
	done chan struct{} // closed when Serve returned
	dead chan struct{} // closed when Serve returned with a failure
	err  error         // what Serve returned; set before done is closed
}

// ServeAMQP serves srv on ln in the background.
func ServeAMQP(srv *frontend.Server, ln net.Listener, log *slog.Logger) *AMQPListener {
	l := &AMQPListener{addr: ln.Addr().String(), done: make(chan struct{}), dead: make(chan struct{})}
	go func() {
		err := srv.Serve(ln)
		l.err = err
		// done before dead: whoever wakes on Dead must find Check
		// failing already.
		close(l.done)
		if err != nil && !errors.Is(err, amqp.ErrServerClosed) {
			log.Error("the AMQP listener stopped; the process cannot accept connections any more", "addr", l.addr, "err", err)
			close(l.dead)
		}
	}()
	return l
}

// Dead is closed when the listener stopped with a failure.
func (l *AMQPListener) Dead() <-chan struct{} { return l.dead }

// Err is why the listener stopped; nil while it runs.
func (l *AMQPListener) Err() error {
	select {
	case <-l.done:
		if l.err == nil {
			return errors.New("stopped")
		}
		return l.err
	default:
		return nil
	}
}

// Check is the readiness check of the listener.
func (l *AMQPListener) Check() error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("%s: not accepting: %w", l.addr, err)
	}
	return nil
}

// FrontendChecks are the readiness checks of a front-end.
func FrontendChecks(r *routing.Router, l *AMQPListener) []adminhttp.Check {
	return []adminhttp.Check{{Name: "amqp listener", Func: l.Check}, RoutingCheck(r)}
}

// RoutingCheck is ready once the router has a routing table.
func RoutingCheck(r *routing.Router) adminhttp.Check {
	return adminhttp.Check{Name: "routing table", Func: func() error {
		select {
		case <-r.Ready():
			return nil
		default:
			return errors.New("no routing table yet from a placement member that caught up with the catalog")
		}
	}}
}

// GatewayChecks are the readiness checks of a gateway: it reached the
// catalog (a routing table came from a placement member that caught up).
func GatewayChecks(r *routing.Router) []adminhttp.Check {
	return []adminhttp.Check{{Name: "catalog", Func: func() error {
		select {
		case <-r.Ready():
			return nil
		default:
			return errors.New("no placement member that caught up with the catalog reached yet")
		}
	}}}
}

// FrontendProbes are the liveness probes of a front-end: the router's
// lock, which every lookup and every routed call takes.
func FrontendProbes(r *routing.Router) []adminhttp.Probe {
	return []adminhttp.Probe{{Name: "router", Run: func() { r.HasEntity("") }}}
}

// Declared is the readiness of the entities a process was told to create
// (an emulator Config.json): created, and in the front-end's routing
// table, so that a client that waited for readiness finds them.
type Declared struct {
	names   []string
	router  *routing.Router
	created atomic.Bool
}

// NewDeclared tracks queues; the process calls Created once it created
// them.
func NewDeclared(queues []QueueSpec, r *routing.Router) *Declared {
	d := &Declared{router: r}
	for _, q := range queues {
		d.names = append(d.names, q.Name)
	}
	return d
}

// Created records that every declared entity was created (or existed).
func (d *Declared) Created() { d.created.Store(true) }

// Check is the readiness check of the declared entities.
func (d *Declared) Check() error {
	if !d.created.Load() {
		return fmt.Errorf("creating the %d entities of --config", len(d.names))
	}
	var missing []string
	for _, n := range d.names {
		if !d.router.HasEntity(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not in the routing table yet: %s", strings.Join(missing, ", "))
	}
	return nil
}

// groupReader is what the readiness of a storage process reads of its
// node.
type groupReader interface {
	Group(id uint64) (node.GroupStatus, error)
}

// openFailures names the groups that failed to open on a node, and why
// (node.Node.OpenFailures).
type openFailures interface {
	OpenFailures() map[uint64]error
}

var _ openFailures = (*node.Node)(nil)

// checkGroups reports the groups among ids that cannot serve: failed to
// open, not open, stopped after a storage failure, with no leader known
// (no quorum reachable), or led here by a leader not serving yet.
func checkGroups(ids []uint64, nodes groupReader, failed openFailures) error {
	fails := failed.OpenFailures()
	var errs []error
	for _, id := range ids {
		if err := fails[id]; err != nil {
			errs = append(errs, fmt.Errorf("group %d failed to open: %w", id, err))
			continue
		}
		st, err := nodes.Group(id)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("group %d is not open: %w", id, err))
		case st.Err != nil:
			errs = append(errs, fmt.Errorf("group %d stopped: %w", id, st.Err))
		case st.Leader.ID == "":
			errs = append(errs, fmt.Errorf("group %d has no leader (electing one, or no quorum reachable)", id))
		case st.State == raft.Leader && !st.Serving:
			errs = append(errs, fmt.Errorf("group %d: this node leads it but does not serve yet", id))
		}
	}
	return errors.Join(errs...)
}

// ReadyChecks are the readiness checks of a storage process.
func (s *Storage) ReadyChecks() []adminhttp.Check {
	id := s.Node.ID()
	return []adminhttp.Check{
		{Name: "node " + id + " catalog", Func: func() error {
			if !s.Placement.Member() {
				// A node that joined after the bootstrap is no member of
				// the meta group: it is ready once the members sent it a
				// routing table (the groups check).
				if s.agent.HasTable() {
					return nil
				}
				return errors.New("not a meta-group member, and no routing table from a member yet")
			}
			if s.Placement.Orphaned() {
				// No word from a meta leader for long (perhaps removed
				// from the group without knowing it): ready while
				// another member serves the table.
				if s.agent.FromOther() {
					return nil
				}
				return errors.New("no word from a meta leader for long, and no other member serves the routing table")
			}
			return s.Placement.Ready()
		}},
		{Name: "node " + id + " groups", Func: func() error {
			mine, err := s.agent.Placed()
			if err != nil {
				return err
			}
			return checkGroups(mine, s.Node, s.failures)
		}},
	}
}

// Probes are the liveness probes of a storage process: the node's and
// the catalog's locks, and each group's Raft state.
func (s *Storage) Probes() []adminhttp.Probe {
	id := s.Node.ID()
	return []adminhttp.Probe{
		{Name: "node " + id + " groups", Run: func() {
			for _, g := range s.Node.Groups() {
				_, _ = s.Node.Group(g)
			}
		}},
		{Name: "node " + id + " catalog", Run: func() {
			s.Placement.RoutesVersion()
			_ = s.Placement.Ready()
		}},
	}
}
