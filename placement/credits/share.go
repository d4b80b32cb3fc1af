package credits

// A namespace served by separate processes spends one budget: every
// front-end (AMQP) and every gateway (the admin API) enforces a share of
// it, and the shares of the live ones add up to the whole. The admin
// API's gateways together get GatewaysPart of it while any is live, the
// front-ends the rest; each kind splits its part evenly. A part per kind
// rather than a part per process keeps the split from following replica
// counts: a chart that runs two gateways for availability does not take
// more from AMQP than one would, and adding front-ends for connections
// leaves the admin API its part.
//
// Every process computes its share from the same counts (the live members
// of the storage nodes' gossip, or the same static counts given to all),
// so the shares add up to the budget once the counts agree; while a
// process joins or fails, counts differ by it until gossip tells everyone.

// GatewaysPart is the part of the budget the gateways spend together
// while any is live: 100 of Service Bus Standard's 1,000 credits, ten
// management requests a second, which deployment tools and autoscalers
// polling entities' counts (KEDA) stay within; a burst past it is
// answered 503, which the admin clients retry. AMQP, which carries the
// messages, keeps nine tenths.
const GatewaysPart = 0.1

// Spenders counts the processes that spend a namespace's credits.
type Spenders struct {
	Frontends int
	Gateways  int
}

// FrontendShare is the part of the budget one front-end spends, counting
// itself among the front-ends even if s does not.
func (s Spenders) FrontendShare() float64 {
	f := max(s.Frontends, 1)
	if s.Gateways <= 0 {
		return 1 / float64(f)
	}
	return (1 - GatewaysPart) / float64(f)
}

// GatewayShare is the part of the budget one gateway spends, counting
// itself among the gateways even if s does not. Without front-ends the
// gateways spend the whole budget.
func (s Spenders) GatewayShare() float64 {
	g := max(s.Gateways, 1)
	if s.Frontends <= 0 {
		return 1 / float64(g)
	}
	return GatewaysPart / float64(g)
}
