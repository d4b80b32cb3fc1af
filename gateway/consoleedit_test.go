package gateway

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestPatchedFieldsRoundTrip: a description as a GET writes it reads back
// through the PUT decoders to the same properties (the console's edit
// keeps what it does not change), and a patched element takes its new
// value, text escaped.
func TestPatchedFieldsRoundTrip(t *testing.T) {
	q := &placementpb.Entity{Name: "q", Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE, Status: placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED,
		Properties: placementpb.QueueDescription{LockDuration: 45 * time.Second, MaxDeliveryCount: 3, RequiresSession: true,
			DefaultMessageTimeToLive: time.Hour, UserMetadata: "a < b & c", ForwardTo: "other", MaxSizeInMegabytes: 1024, MaxMessageSizeInKilobytes: 256, DuplicateDetectionHistoryTimeWindow: 10 * time.Minute}.Properties()}
	fields, err := patchedFields(describeQueue(q, nil, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeQueue(fields)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.desc.Properties(); !proto.Equal(got, q.Properties) || req.status != placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED {
		t.Fatalf("queue read back as %v (status %v), want %v", got, req.status, q.Properties)
	}
	fields, err = patchedFields(describeQueue(q, nil, nil), map[string]string{"LockDuration": "PT10S", "UserMetadata": "x <y> & 'z'"})
	if err != nil {
		t.Fatal(err)
	}
	if req, err = DecodeQueue(fields); err != nil {
		t.Fatal(err)
	}
	if req.desc.LockDuration != 10*time.Second || req.desc.UserMetadata != "x <y> & 'z'" || req.desc.MaxDeliveryCount != 3 {
		t.Fatalf("patched queue: %+v", req.desc)
	}

	topic := &placementpb.Entity{Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC,
		Properties: placementpb.TopicDescription{DefaultMessageTimeToLive: time.Minute, MaxSizeInMegabytes: 2048, UserMetadata: "m", MaxMessageSizeInKilobytes: 256, DuplicateDetectionHistoryTimeWindow: 10 * time.Minute}.Properties()}
	fields, err = patchedFields(describeTopic(topic, topicFigures{}, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	treq, err := DecodeTopic(fields)
	if err != nil {
		t.Fatal(err)
	}
	if got := treq.desc.Properties(); !proto.Equal(got, topic.Properties) {
		t.Fatalf("topic read back as %v, want %v", got, topic.Properties)
	}

	yes := true // Azure's default, which the description writes
	sub := &placementpb.Entity{Name: "t/Subscriptions/s", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Properties: placementpb.SubscriptionDescription{LockDuration: 20 * time.Second, MaxDeliveryCount: 5, UserMetadata: "s", DeadLetteringOnFilterEvaluationExceptions: &yes}.Properties()}
	fields, err = patchedFields(describeSubscription(sub, nil), map[string]string{"MaxDeliveryCount": "6"})
	if err != nil {
		t.Fatal(err)
	}
	sreq, err := DecodeSubscription(fields)
	if err != nil {
		t.Fatal(err)
	}
	want := placementpb.SubscriptionDescription{LockDuration: 20 * time.Second, MaxDeliveryCount: 6, UserMetadata: "s", DeadLetteringOnFilterEvaluationExceptions: &yes}.Properties()
	if got := sreq.desc.Properties(); !proto.Equal(got, want) {
		t.Fatalf("subscription read back as %v, want %v", got, want)
	}
}
