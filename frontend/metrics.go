package frontend

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/placement/credits"
)

// The front-end counts, per entity, what Azure Monitor reports to Service
// Bus users: requests and their outcome, messages in and out. A link takes
// its entity's counters once at attach, so the hot path is an atomic add:
// no lock, no map lookup per message.

// entityCounters are the counts of one entity, since the process started.
type entityCounters struct {
	name               string        // as the catalog spells it: the label
	incomingRequests   atomic.Uint64 // send transfers, dispositions, $management requests
	successfulRequests atomic.Uint64
	serverErrors       atomic.Uint64 // failures a retry may mend (status >= 500)
	userErrors         atomic.Uint64 // failures of the request itself
	incomingMessages   atomic.Uint64 // messages committed by sends
	outgoingMessages   atomic.Uint64 // messages delivered to receivers
}

// outcome counts n requests that ended with f (failed) or succeeded.
func (c *entityCounters) outcome(n int, f failure, failed bool) {
	c.incomingRequests.Add(uint64(n))
	switch {
	case !failed:
		c.successfulRequests.Add(uint64(n))
	case f.cond == condServerBusy:
		// Throttled: counted by the throttle (throttle.go), apart from
		// server errors, as Azure Monitor keeps them.
	case f.status >= 500:
		c.serverErrors.Add(uint64(n))
	default:
		c.userErrors.Add(uint64(n))
	}
}

// maxCountedEntities bounds the entities counted one by one: the
// namespace's limit (10,000) twice over, for entities deleted and made
// anew under other names. Past it, counts go to otherEntities.
const maxCountedEntities = 20_000

// otherEntities is the label of the counts past maxCountedEntities.
const otherEntities = "(other)"

// counters are the front-end's metrics.
type counters struct {
	mu       sync.Mutex
	entities map[string]*entityCounters // by lower-cased name (names are case-insensitive)

	connsOpened atomic.Uint64
	connsClosed atomic.Uint64
}

// entity returns the counters of an entity (a link calls it at attach).
func (c *counters) entity(name string) *entityCounters {
	key := strings.ToLower(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entities == nil {
		c.entities = make(map[string]*entityCounters)
	}
	if e := c.entities[key]; e != nil {
		return e
	}
	if len(c.entities) >= maxCountedEntities {
		key = otherEntities
		if e := c.entities[key]; e != nil {
			return e
		}
	}
	label := name
	if key == otherEntities {
		label = otherEntities
	}
	e := &entityCounters{name: label}
	c.entities[key] = e
	return e
}

// Metric names follow Azure Monitor's Service Bus metrics (IncomingRequests,
// SuccessfulRequests, ServerErrors, UserErrors, ThrottledRequests,
// IncomingMessages, OutgoingMessages, ActiveConnections,
// ConnectionsOpened, ConnectionsClosed), in Prometheus's spelling.
var (
	descEntityCounters = []struct {
		desc *prometheus.Desc
		get  func(*entityCounters) uint64
	}{
		{entityDesc("incoming_requests_total", "Requests received for the entity: send transfers, settlements, $management operations."),
			func(c *entityCounters) uint64 { return c.incomingRequests.Load() }},
		{entityDesc("successful_requests_total", "Requests for the entity that succeeded."),
			func(c *entityCounters) uint64 { return c.successfulRequests.Load() }},
		{entityDesc("server_errors_total", "Requests for the entity that failed on the broker's side (a retry may succeed)."),
			func(c *entityCounters) uint64 { return c.serverErrors.Load() }},
		{entityDesc("user_errors_total", "Requests for the entity that failed for a reason of their own (lock lost, quota, invalid)."),
			func(c *entityCounters) uint64 { return c.userErrors.Load() }},
		{entityDesc("incoming_messages_total", "Messages sent to the entity and committed."),
			func(c *entityCounters) uint64 { return c.incomingMessages.Load() }},
		{entityDesc("outgoing_messages_total", "Messages of the entity delivered to receivers."),
			func(c *entityCounters) uint64 { return c.outgoingMessages.Load() }},
	}
	descThrottled   = entityDesc("throttled_requests_total", "Requests for the entity refused (sends, $management operations) or made to wait (receives) by throttling.")
	descCredits     = prometheus.NewDesc("quorumbus_throttle_credits_per_second", credits.PerSecondHelp, nil, nil)
	descActiveConns = prometheus.NewDesc("quorumbus_active_connections", "AMQP connections open now.", nil, nil)
	descConnsOpened = prometheus.NewDesc("quorumbus_connections_opened_total", "AMQP connections opened.", nil, nil)
	descConnsClosed = prometheus.NewDesc("quorumbus_connections_closed_total", "AMQP connections closed.", nil, nil)
)

func entityDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("quorumbus_"+name, help, []string{"entity"}, nil)
}

// Collector returns the front-end's metrics for a Prometheus registry.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descEntityCounters {
		ch <- d.desc
	}
	ch <- descThrottled
	ch <- descCredits
	ch <- descActiveConns
	ch <- descConnsOpened
	ch <- descConnsClosed
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := &c.s.counters
	m.mu.Lock()
	entities := make([]*entityCounters, 0, len(m.entities))
	for _, e := range m.entities {
		entities = append(entities, e)
	}
	m.mu.Unlock()
	for _, e := range entities {
		for _, d := range descEntityCounters {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.get(e)), e.name)
		}
	}
	for name, n := range c.s.Throttled() {
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(descCredits, prometheus.GaugeValue, float64(c.s.throttle.credits.PerSecond()))
	ch <- prometheus.MustNewConstMetric(descActiveConns, prometheus.GaugeValue, float64(c.s.amqp.Stats().Conns))
	ch <- prometheus.MustNewConstMetric(descConnsOpened, prometheus.CounterValue, float64(m.connsOpened.Load()))
	ch <- prometheus.MustNewConstMetric(descConnsClosed, prometheus.CounterValue, float64(m.connsClosed.Load()))
}
