package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// TopicSubscription is one subscription of the topic workload: the rule
// the broker evaluates and the same rule in Go, which checker.Topic
// applies to the properties each send recorded.
type TopicSubscription struct {
	Name  string
	Rule  *placementpb.Rule
	Match func(attrs map[string]string) bool
}

// TopicSubscriptions: one of each kind of filter the broker has.
var TopicSubscriptions = []TopicSubscription{
	{Name: "all", Rule: &placementpb.Rule{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}},
		Match: func(map[string]string) bool { return true }},
	{Name: "red", Rule: &placementpb.Rule{Name: "red", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'red'"}}},
		Match: func(a map[string]string) bool { return a["color"] == "red" }},
	{Name: "big-blue", Rule: &placementpb.Rule{Name: "big-blue", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'blue' AND size > 5"}}},
		Match: func(a map[string]string) bool { n, _ := strconv.Atoi(a["size"]); return a["color"] == "blue" && n > 5 }},
	{Name: "subject-x", Rule: &placementpb.Rule{Name: "subject-x", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{Subject: "x"}}},
		Match: func(a map[string]string) bool { return a["subject"] == "x" }},
}

// TopicMatchers maps each subscription's entity path to its rule in Go.
func TopicMatchers(topic string) map[string]func(map[string]string) bool {
	out := map[string]func(map[string]string) bool{}
	for _, s := range TopicSubscriptions {
		out[SubscriptionPath(topic, s.Name)] = s.Match
	}
	return out
}

// SubscriptionPath is a subscription's entity path.
func SubscriptionPath(topic, sub string) string { return topic + "/Subscriptions/" + sub }

// TopicEntities are the create requests of the topic and its
// subscriptions, in order.
func TopicEntities(topic string, lock time.Duration) []*placementpb.CreateEntityRequest {
	reqs := []*placementpb.CreateEntityRequest{{Name: topic, Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}}
	for _, s := range TopicSubscriptions {
		reqs = append(reqs, &placementpb.CreateEntityRequest{Name: SubscriptionPath(topic, s.Name), Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			Properties: &placementpb.QueueProperties{LockDurationMs: lock.Milliseconds()}, Rules: []*placementpb.Rule{s.Rule}})
	}
	return reqs
}

// TopicConfig drives a topic with TopicSubscriptions.
type TopicConfig struct {
	Common
	Topic                    string
	Senders, ReceiversPerSub int
	SendRate                 float64
	Seed                     uint64
}

// StartTopic sends messages with random color, size and subject (recorded
// in the send's Attrs) and receives from every subscription; each
// acknowledged send is expected in exactly the subscriptions whose rule
// matches it.
func StartTopic(ctx context.Context, cfg TopicConfig) Runner {
	s := newStream(ctx, cfg.Common, "topic")
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	colors := []string{"red", "blue", "green"}
	for i := range cfg.Senders {
		p := 500 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		next := func(n int) (*amqp.Message, history.Op) {
			id := fmt.Sprintf("o%d-%d", p, n)
			attrs := map[string]string{"color": colors[rng.IntN(len(colors))], "size": strconv.Itoa(rng.IntN(10))}
			subject := ""
			if rng.IntN(3) == 0 {
				subject = "x"
				attrs["subject"] = subject
			}
			size, _ := strconv.Atoi(attrs["size"])
			m := &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)},
				ApplicationProperties: map[string]any{"color": attrs["color"], "size": int64(size)}}
			if subject != "" {
				m.Properties.Subject = &subject
			}
			return m, history.Op{Entity: cfg.Topic, MsgID: id, Attrs: attrs}
		}
		acked := func(inv history.Op) {
			for _, sub := range TopicSubscriptions {
				if sub.Match(inv.Attrs) {
					s.expect(SubscriptionPath(cfg.Topic, sub.Name)+"|"+inv.MsgID, 1)
				}
			}
		}
		s.goSend(func(ctx context.Context) { s.sendLoop(ctx, p, cfg.Topic, interval, next, acked) })
	}
	for j, sub := range TopicSubscriptions {
		path := SubscriptionPath(cfg.Topic, sub.Name)
		for i := range cfg.ReceiversPerSub {
			s.goRecv(func(ctx context.Context) {
				s.recvLoop(ctx, 550+10*j+i, path, path, 10, func(d history.Op) string { return path + "|" + d.MsgID }, nil)
			})
		}
	}
	return s
}
