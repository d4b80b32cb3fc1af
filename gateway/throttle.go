package gateway

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/placement/credits"
)

// Credit-based throttling of the admin API, as Service Bus Standard does
// it (seed 003): every management operation costs credits.Management (10)
// of the namespace's credits a second, a create, read, update or delete
// of a queue, topic, subscription or rule as much as a page of a list or
// $namespaceinfo, since Service Bus counts a management operation per
// request. A request past the credits answers 503 with Service Bus's
// words ("... Error code: 50009. Please wait 2 seconds and try again."),
// which the admin clients retry with their backoff; nothing was done.
// Only requests that passed the token check spend credits; the console
// (console.go) is not throttled.
//
// Config.Credits is the budget: a gateway process's own share of the
// namespace's credits, which it shares with the live front-ends and
// gateways (placement/credits.Spenders), or in dev mode the front-end's
// bucket itself: either way AMQP and the admin API spend one budget.

// throttledStatus is what a throttled management request answers: the
// status Service Bus gives server-busy over HTTP, and one the Go, .NET and
// JavaScript admin clients retry by default.
const throttledStatus = http.StatusServiceUnavailable

// admit spends a management operation's credits for the request and
// reports whether it may go ahead; otherwise it answered 503 and counted
// the request against its entity.
func (g *Gateway) admit(q request) bool {
	entity := throttledEntity(q.r.URL.Path)
	if g.cfg.Credits.Take(entity, credits.Management) {
		return true
	}
	g.log.Debug("admin request throttled", "method", q.r.Method, "path", q.r.URL.Path, "entity", entity)
	writeError(q.w, throttledStatus, fmt.Sprintf("%s TrackingId:%s, Timestamp:%s",
		credits.ThrottledText, trackingID(), g.cfg.Now().UTC().Format(time.RFC3339)))
	return false
}

// namespaceEntity is what requests of the namespace itself (lists,
// $namespaceinfo) are counted against.
const namespaceEntity = "$namespace"

// throttledEntity is the entity a request's path addresses, as the
// catalog names it: a queue or topic by its path, a subscription (and
// its rules) as <topic>/Subscriptions/<name>, a list of subscriptions
// its topic, and the namespace's own resources namespaceEntity.
func throttledEntity(path string) string {
	path = strings.Trim(path, "/")
	if path == "" || strings.HasPrefix(path, "$") {
		return namespaceEntity
	}
	segs := strings.Split(path, "/")
	if len(segs) >= 2 && strings.EqualFold(segs[1], "Subscriptions") {
		if len(segs) == 2 {
			return segs[0]
		}
		return strings.Join(segs[:3], "/")
	}
	return path
}

// trackingID is a random UUID, as Service Bus puts in its error details
// so that a client's report can be found in logs.
func trackingID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Throttled returns how many admin requests were throttled, per entity
// (throttledEntity), as Config.Credits counts them; with the front-end's
// bucket, its throttled requests too.
func (g *Gateway) Throttled() map[string]uint64 { return g.cfg.Credits.Throttled() }

var descThrottled = prometheus.NewDesc("quorumbus_throttled_requests_total",
	"Requests for the entity refused by throttling: admin API requests answered 503 (error code 50009).", []string{"entity"}, nil)

var descCredits = prometheus.NewDesc("quorumbus_throttle_credits_per_second", credits.PerSecondHelp, nil, nil)

// ThrottledCollector returns a Prometheus collector of Throttled, as
// quorumbus_throttled_requests_total{entity}, the front-end's name for
// its own, and of the credits a second the gateway admits, as
// quorumbus_throttle_credits_per_second. A gateway process registers it;
// a process whose gateway spends the front-end's bucket does not, since
// the front-end's collector reports the same.
func (g *Gateway) ThrottledCollector() prometheus.Collector { return throttledCollector{g} }

type throttledCollector struct{ g *Gateway }

func (c throttledCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descThrottled
	ch <- descCredits
}

func (c throttledCollector) Collect(ch chan<- prometheus.Metric) {
	for entity, n := range c.g.Throttled() {
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, float64(n), entity)
	}
	ch <- prometheus.MustNewConstMetric(descCredits, prometheus.GaugeValue, float64(c.g.cfg.Credits.PerSecond()))
}
