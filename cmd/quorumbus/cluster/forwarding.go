package cluster

import (
	"context"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// forwardTarget is where a storage process's forwarders send: the
// cluster's routing, with the view a topic's rules read added to each
// message sent to a topic, as a front-end adds it to a client's send
// (frontend.ForTopic). The node decodes no AMQP.
type forwardTarget struct{ *routing.Router }

var _ node.ForwardTarget = forwardTarget{}

func (t forwardTarget) Send(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	if e.GetKind() == placementpb.EntityKind_ENTITY_KIND_TOPIC {
		for _, m := range msgs {
			if err := frontend.ForTopic(m); err != nil {
				// Undecodable here is undecodable at every try: the
				// forwarder keeps the message and says why.
				return nil, err
			}
		}
	}
	return t.Router.Send(ctx, e, partition, msgs)
}
