package jepsen

import (
	"context"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/checker"
	"github.com/quorumbus/quorumbus/tests/jepsen/cluster"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
	"github.com/quorumbus/quorumbus/tests/jepsen/workload"
)

// The entities of the feature workloads, beside the queue "jepsen".
const (
	dedupQueue   = "jepsen-dedup"
	schedQueue   = "jepsen-scheduled"
	renewQueue   = "jepsen-renew"
	sessionQueue = "jepsen-sessions"
	topicName    = "jepsen-topic"
	settleQueue  = "jepsen-settle"

	// dedupWindow is short so that resends past it happen within a run.
	dedupWindow = 20 * time.Second
	// renewLock is the lock-renewal queue's lock: receivers hold for up
	// to three of it, renewing.
	renewLock = 5 * time.Second
	// settleMaxDeliveries is the settlement queue's MaxDeliveryCount: low,
	// so that abandoned messages reach the dead-letter sub-queue too.
	settleMaxDeliveries = 3
)

// startFeatures starts the workloads of duplicate detection, scheduled
// messages, lock renewal, sessions, topics and settlements (abandon,
// dead-letter, defer) beside the queue's, at
// rates that together stay well under the queue's, each times scale (the
// soak's are lower: profile.featureScale).
func startFeatures(c *cluster.Cluster, rec *history.Recorder, seed uint64, scale float64) []workload.Runner {
	ctx := context.Background()
	rate := func(r float64) float64 { return r * scale }
	common := workload.Common{Dial: c.DialAMQP, Rec: rec, OpTimeout: 10 * time.Second}
	return []workload.Runner{
		workload.StartDedup(ctx, workload.DedupConfig{Common: common, Queue: dedupQueue, Window: dedupWindow,
			Senders: 2, Receivers: 2, SendRate: rate(20), Seed: seed}),
		workload.StartScheduled(ctx, workload.ScheduledConfig{Common: common, Queue: schedQueue,
			Senders: 1, Receivers: 2, SendRate: rate(10), MaxDelay: 5 * time.Second, Seed: seed}),
		workload.StartRenew(ctx, workload.RenewConfig{Common: common, Queue: renewQueue, Lock: renewLock,
			Senders: 1, Receivers: 4, SendRate: rate(1), Seed: seed}),
		workload.StartSessions(ctx, workload.SessionConfig{Common: common, Queue: sessionQueue, Sessions: 6,
			Senders: 2, Receivers: 3, SendRate: rate(20), Seed: seed}),
		workload.StartTopic(ctx, workload.TopicConfig{Common: common, Topic: topicName,
			Senders: 1, ReceiversPerSub: 1, SendRate: rate(15), Seed: seed}),
		workload.StartSettle(ctx, workload.SettleConfig{Common: common, Queue: settleQueue,
			Senders: 1, Receivers: 2, DeadLetterReceivers: 1, SendRate: rate(10), Seed: seed}),
	}
}

// featureSuites are the checkers of each feature workload over its own
// entities' operations; the time-bound ones allow for the clock skews the
// faults put in.
func featureSuites(faults []nemesis.Fault) []checker.Suite {
	skews := clockSkews(faults)
	perMessage := func(withSeq bool) []checker.Checker {
		cs := []checker.Checker{}
		for _, c := range checker.Queue {
			if c.Name != "sequence-number" || withSeq {
				cs = append(cs, c)
			}
		}
		return cs
	}
	suites := []checker.Suite{
		{Name: "dedup", Entities: []string{dedupQueue}, Checkers: append([]checker.Checker{
			{Name: "dedup", Property: "P9: duplicates within the window are dropped, resends past it are new messages, nothing acknowledged is lost", Check: checker.Dedup(dedupWindow, skews)},
		}, append(checker.PerCopy(checker.Queue, "double-complete", "resurrected", "delivery-count"),
			checker.Without(checker.Queue, "lost", "aborted-read", "double-complete", "resurrected", "delivery-count", "sequence-number")...)...)},
		{Name: "scheduled", Entities: []string{schedQueue}, Checkers: append(perMessage(true),
			checker.Checker{Name: "scheduled", Property: "P10: no scheduled message is delivered before its time", Check: checker.Scheduled(checker.ScheduledTolerance, skews)})},
		{Name: "renew", Entities: []string{renewQueue}, Checkers: append(perMessage(true),
			checker.Checker{Name: "lock-renew", Property: "P11: no complete succeeds after a renew reported the lock lost; a lock is held by one receiver at a time", Check: checker.LockRenew})},
		// A session given back on close returns its unsettled messages
		// without counting a delivery, so delivery counts may repeat
		// across holdings: P7 does not apply.
		{Name: "sessions", Entities: []string{sessionQueue}, Checkers: append(checker.Without(checker.Queue, "delivery-count"),
			checker.Checker{Name: "session-exclusive", Property: "P12: a session is locked by one receiver at a time", Check: checker.SessionExclusive},
			checker.Checker{Name: "session-order", Property: "P13: a session's messages are delivered in order", Check: checker.SessionOrder},
			checker.Checker{Name: "session-state", Property: "P18: each session's state is a linearizable register (porcupine)", Check: checker.SessionState})},
		{Name: "topic", Entities: append([]string{topicName}, subscriptionPaths()...), Checkers: []checker.Checker{
			{Name: "fan-out", Property: "P14: every acknowledged send reaches exactly the subscriptions whose rules match it", Check: checker.Topic(topicName, workload.TopicMatchers(topicName))},
		}},
		// Deferred messages come back under a new lock at the same
		// delivery count, so P7 does not apply; P4 reads the queue alone
		// (a dead-lettered copy keeps its count).
		{Name: "settle", Entities: []string{settleQueue, workload.DeadLetterPath(settleQueue)}, Checkers: append([]checker.Checker{
			{Name: "settled", Property: "P17: every acknowledged send is completed or dead-lettered; dead-lettered and deferred messages leave the queue's plain receives", Check: checker.Settled(settleQueue, workload.DeadLetterPath(settleQueue), workload.ExplicitDeadLetterReason)},
		}, checker.Without(checker.Queue, "lost", "resurrected", "delivery-count")...)},
		{Name: "settle-queue", Entities: []string{settleQueue}, Checkers: checker.Without(checker.Queue, "lost", "unexpected", "aborted-read", "double-complete", "delivery-count", "sequence-number")},
		{Name: "topic-catalog", Entities: []string{history.TopicCatalog}, Checkers: []checker.Checker{
			{Name: "linearizable", Property: "P19: topics, subscriptions and rules are linearizable, a subscription needing its topic and a rule its subscription (porcupine)", Check: checker.TopicCatalogLinearizable},
		}},
		{Name: "catalog", Entities: []string{workload.MetadataEntity}, Checkers: []checker.Checker{
			{Name: "linearizable", Property: "P15: creates, deletes and gets of entities are linearizable (porcupine)", Check: checker.CatalogLinearizable},
		}},
	}
	for _, sub := range subscriptionPaths() {
		suites = append(suites, checker.Suite{Name: sub, Entities: []string{sub},
			Checkers: checker.Without(checker.Queue, "lost", "unexpected", "aborted-read")})
	}
	return suites
}

// clockSkews are the clock-skew faults as the checkers take them.
func clockSkews(faults []nemesis.Fault) []checker.Skew {
	var out []checker.Skew
	for _, f := range faults {
		if f.Kind == nemesis.ClockSkew && f.ClockOffset != 0 {
			out = append(out, checker.Skew{Start: f.Start, End: f.End, By: f.ClockOffset})
		}
	}
	return out
}

func subscriptionPaths() []string {
	var out []string
	for _, s := range workload.TopicSubscriptions {
		out = append(out, workload.SubscriptionPath(topicName, s.Name))
	}
	return out
}
