package catalog

import (
	"fmt"
	"slices"
	"strings"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Auto-forwarding in the catalog: where an entity may forward to. The
// partitions' forwarders (node/forward.go) move the messages; the catalog
// refuses what they cannot do and the loops it can see.

// checkForwardTargets refuses forwarding that cannot work or would loop:
//   - a destination that exists and is a subscription (nobody sends to
//     one);
//   - a chain of ForwardTo and ForwardDeadLetteredMessagesTo that leads
//     back to the entity (name), through entities as the catalog holds
//     them with name's new properties p. A topic leads to each of its
//     subscriptions (a message forwarded to it may reach any of them), so
//     a subscription that forwards to a queue that forwards to its topic
//     is a loop too.
//
// A destination that does not exist yet is accepted: the forwarder keeps
// the messages until it does (Config.json and the CLI declare entities in
// any order). A queue or topic created later under that name closes no
// loop the catalog checks: the hop limit (partition.MaxForwardHops) ends
// such a chain.
func (s *State) checkForwardTargets(name string, p *pb.QueueProperties) error {
	for _, fwd := range []string{p.GetForwardTo(), p.GetForwardDeadLetteredMessagesTo()} {
		if fwd == "" {
			continue
		}
		if d := s.byName(fwd); d != nil && d.GetKind() == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
			return fmt.Errorf("%w: %q forwards to %q, a subscription, which takes no sends", ErrInvalidProperties, name, fwd)
		}
	}
	if path := s.forwardLoop(name, p); path != nil {
		return fmt.Errorf("%w: forwarding loop %s", ErrInvalidProperties, strings.Join(path, " -> "))
	}
	return nil
}

// forwardLoop returns a chain of forwards from name back to name, or nil.
func (s *State) forwardLoop(name string, p *pb.QueueProperties) []string {
	start := Key(name)
	targets := func(n string) []string {
		if Key(n) == start {
			return []string{p.GetForwardTo(), p.GetForwardDeadLetteredMessagesTo()}
		}
		e := s.byName(n)
		if e == nil {
			return nil
		}
		if e.GetKind() == pb.EntityKind_ENTITY_KIND_TOPIC {
			// name itself may be a subscription of n being created.
			var subs []string
			if t, _, ok := SplitSubscriptionName(name); ok && Key(t) == Key(n) {
				subs = append(subs, name)
			}
			for _, sub := range s.subscriptionsOf(e) {
				if Key(sub.Name) != start {
					subs = append(subs, sub.Name)
				}
			}
			slices.SortFunc(subs, func(a, b string) int { return strings.Compare(Key(a), Key(b)) })
			return subs
		}
		return []string{e.GetProperties().GetForwardTo(), e.GetProperties().GetForwardDeadLetteredMessagesTo()}
	}
	seen := map[string]bool{}
	var walk func(n string, path []string) []string
	walk = func(n string, path []string) []string {
		for _, t := range targets(n) {
			if t == "" {
				continue
			}
			next := append(path[:len(path):len(path)], t)
			if Key(t) == start {
				return next
			}
			if seen[Key(t)] {
				continue
			}
			seen[Key(t)] = true
			if loop := walk(t, next); loop != nil {
				return loop
			}
		}
		return nil
	}
	return walk(name, []string{name})
}
