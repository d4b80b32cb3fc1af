package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The gateway reports each entity's runtime figures (what Azure Monitor
// calls ActiveMessages, DeadletteredMessages, ScheduledMessages, Size and
// Messages) from the partitions' counters, read when Prometheus scrapes:
// the same figures the admin API's CountDetails gives.

var (
	descActive    = prometheus.NewDesc("quorumbus_active_messages", "Active messages of the entity (deferred ones included), summed over its partitions.", []string{"entity"}, nil)
	descDead      = prometheus.NewDesc("quorumbus_dead_lettered_messages", "Messages in the entity's dead-letter sub-queue.", []string{"entity"}, nil)
	descScheduled = prometheus.NewDesc("quorumbus_scheduled_messages", "Scheduled messages of the entity, not yet active.", []string{"entity"}, nil)
	descSize      = prometheus.NewDesc("quorumbus_size_bytes", "Bytes of the entity's messages.", []string{"entity"}, nil)
	descDegraded  = prometheus.NewDesc("quorumbus_entity_degraded", "1 when a partition of the entity has no quorum (placement's Degraded).", []string{"entity"}, nil)
	descScrapeErr = prometheus.NewDesc("quorumbus_entity_scrape_errors", "Entities whose counters could not be read in this scrape (left out above).", nil, nil)
)

// Collector returns a Prometheus collector of every queue's, topic's and
// subscription's runtime figures (a subscription's entity label is its
// catalog name, <topic>/Subscriptions/<name>). A scrape lists the
// entities from the catalog and reads their
// partitions' counters with one GroupStats call per group, within
// StatsTimeout.
func (g *Gateway) Collector() prometheus.Collector { return entityCollector{g} }

type entityCollector struct{ g *Gateway }

func (c entityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descDead, descScheduled, descSize, descDegraded, descScrapeErr} {
		ch <- d
	}
}

func (c entityCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.StatsTimeout+5*time.Second)
	defer cancel()
	var es []*placementpb.Entity
	for _, kind := range []placementpb.EntityKind{
		placementpb.EntityKind_ENTITY_KIND_QUEUE, placementpb.EntityKind_ENTITY_KIND_TOPIC, placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
	} {
		resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: kind})
		if err != nil {
			g.log.Warn("metrics: listing entities", "kind", kind, "err", err)
			ch <- prometheus.NewInvalidMetric(descScrapeErr, err)
			return
		}
		es = append(es, resp.GetEntities()...)
	}
	counts := make([]*Counts, len(es))
	g.forEachCounted(ctx, es, func(i int, c *Counts) { counts[i] = c })
	failed := 0
	for i, e := range es {
		name := e.GetName()
		degraded := 0.0
		if e.GetDegraded() {
			degraded = 1
		}
		ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, degraded, name)
		n := counts[i]
		if n == nil {
			failed++
			continue
		}
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(n.Active), name)
		ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(n.DeadLetter), name)
		ch <- prometheus.MustNewConstMetric(descScheduled, prometheus.GaugeValue, float64(n.Scheduled), name)
		ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(n.SizeBytes), name)
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, float64(failed))
}
