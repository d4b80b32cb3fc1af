package compat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Entity-level authorization rules through the admin API, as a team
// would use them: the Go admin client creates a queue and a topic with
// rules, reads their keys back, and clients connect with those keys
// through the Go SDK, allowed what the rules' rights allow.

// waitForKey waits until the front-end admits name with key (with the
// rules of the routing table it follows), or, with gone, refuses it.
func waitForKey(t *testing.T, ctx context.Context, c *cluster.Dev, name, key string, gone bool) {
	t.Helper()
	for {
		_, err := c.Router.Ruleset().Authenticate(name, key)
		if (err == nil) != gone {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("rule %s: the front-end never saw the change (gone=%t)", name, gone)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ruleOf finds a rule by name in what the admin client answered.
func ruleOf(t *testing.T, rules []admin.AuthorizationRule, name string) admin.AuthorizationRule {
	t.Helper()
	for _, r := range rules {
		if r.KeyName != nil && *r.KeyName == name {
			return r
		}
	}
	t.Fatalf("no rule %s among %d", name, len(rules))
	return admin.AuthorizationRule{}
}

// receiveOne receives one message with a client, or returns the error.
func receiveOne(ctx context.Context, client *azservicebus.Client, queue, topic, sub string) (string, error) {
	var r *azservicebus.Receiver
	var err error
	if topic != "" {
		r, err = client.NewReceiverForSubscription(topic, sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	} else {
		r, err = client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	}
	if err != nil {
		return "", err
	}
	defer r.Close(ctx)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msgs, err := r.ReceiveMessages(rctx, 1, nil)
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		return "", errors.New("no message")
	}
	return string(msgs[0].Body), nil
}

// TestAdminEntityAuthorizationRules: a queue created with rules through
// the Go admin client answers them with their keys (generated where the
// client gave none, as Azure does), GET and the list answer the same,
// and the catalog holds them as the CLI's rules; a Send rule sends and
// cannot receive, a Listen rule receives and cannot send, neither works
// on another queue; an update that gives the reader new keys and drops
// the sender leaves the old key and the sender refused; a topic's rules
// serve its subscriptions; a rule put as the CLI puts it is one of the
// topic's and survives an update that sends back what GET answered;
// what Azure refuses is 400.
func TestAdminEntityAuthorizationRules(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	senderKey := sas.NewKey()
	created, err := ac.CreateQueue(ctx, "orders", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		AuthorizationRules: []admin.AuthorizationRule{
			{KeyName: to.Ptr("orders-reader"), AccessRights: []admin.AccessRight{admin.AccessRightListen}},
			{KeyName: to.Ptr("orders-sender"), AccessRights: []admin.AccessRight{admin.AccessRightSend}, PrimaryKey: &senderKey},
		},
	}})
	if err != nil {
		t.Fatalf("CreateQueue with rules: %v", err)
	}
	reader := ruleOf(t, created.AuthorizationRules, "orders-reader")
	if reader.PrimaryKey == nil || !sas.IsAzureKey(*reader.PrimaryKey) || reader.SecondaryKey == nil || !sas.IsAzureKey(*reader.SecondaryKey) ||
		!slices.Equal(reader.AccessRights, []admin.AccessRight{admin.AccessRightListen}) || reader.CreatedTime == nil || reader.CreatedTime.IsZero() {
		t.Fatalf("the created reader rule: %+v", reader)
	}
	if sender := ruleOf(t, created.AuthorizationRules, "orders-sender"); *sender.PrimaryKey != senderKey || !sas.IsAzureKey(*sender.SecondaryKey) {
		t.Fatal("the created sender rule lost the key it was given, or has no secondary key")
	}
	if _, err := ac.CreateQueue(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}

	got, err := ac.GetQueue(ctx, "orders", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue: %v", err)
	}
	if r := ruleOf(t, got.AuthorizationRules, "orders-reader"); *r.PrimaryKey != *reader.PrimaryKey || *r.SecondaryKey != *reader.SecondaryKey {
		t.Fatal("GetQueue answered other keys than the create")
	}
	listed := false
	pager := ac.NewListQueuesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.Queues {
			switch q.QueueName {
			case "orders":
				listed = len(q.AuthorizationRules) == 2 && *ruleOf(t, q.AuthorizationRules, "orders-reader").PrimaryKey == *reader.PrimaryKey
			case "other":
				if len(q.AuthorizationRules) != 0 {
					t.Fatalf("other lists rules: %+v", q.AuthorizationRules)
				}
			}
		}
	}
	if !listed {
		t.Fatal("the list does not answer orders' rules")
	}

	// The same rules as the CLI's: in the catalog, on the entity.
	pc, closeFn, err := cluster.DialPlacement(c.NodeAddrs[0], c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	inCatalog, err := pc.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{Entity: "orders"})
	if err != nil || len(inCatalog.GetRules()) != 2 || inCatalog.GetRules()[0].GetName() != "orders-reader" ||
		inCatalog.GetRules()[0].GetPrimaryKey() != *reader.PrimaryKey || inCatalog.GetRules()[0].GetRights() != uint32(sas.Listen) {
		t.Fatalf("the catalog holds %v, %v", inCatalog.GetRules(), err)
	}

	waitForKey(t, ctx, c, "orders-reader", *reader.PrimaryKey, false)
	waitForKey(t, ctx, c, "orders-sender", senderKey, false)
	sender := ruleClient(t, c, "orders-sender", senderKey)
	if err := send(ctx, sender, "orders", "hello"); err != nil {
		t.Fatalf("the Send rule sending: %v", err)
	}
	if err := send(ctx, sender, "other", "misplaced"); !unauthorized(err) {
		t.Fatalf("the Send rule on another queue: %v, want unauthorized", err)
	}
	if _, err := receiveOne(ctx, sender, "orders", "", ""); !unauthorized(err) {
		t.Fatalf("the Send rule receiving: %v, want unauthorized", err)
	}
	readerClient := ruleClient(t, c, "orders-reader", *reader.SecondaryKey)
	if err := send(ctx, readerClient, "orders", "from-reader"); !unauthorized(err) {
		t.Fatalf("the Listen rule sending: %v, want unauthorized", err)
	}
	if body, err := receiveOne(ctx, readerClient, "orders", "", ""); err != nil || body != "hello" {
		t.Fatalf("the Listen rule receiving: %q, %v", body, err)
	}

	// Update: the reader gets new keys, the sender goes.
	newKey := sas.NewKey()
	upd := got.QueueProperties
	upd.AuthorizationRules = []admin.AuthorizationRule{{KeyName: to.Ptr("orders-reader"), AccessRights: []admin.AccessRight{admin.AccessRightListen}, PrimaryKey: &newKey, SecondaryKey: to.Ptr(sas.NewKey())}}
	updated, err := ac.UpdateQueue(ctx, "orders", upd, nil)
	if err != nil {
		t.Fatalf("UpdateQueue with new rules: %v", err)
	}
	if len(updated.AuthorizationRules) != 1 || *updated.AuthorizationRules[0].PrimaryKey != newKey {
		t.Fatalf("the update answered %+v", updated.AuthorizationRules)
	}
	waitForKey(t, ctx, c, "orders-reader", *reader.PrimaryKey, true)
	waitForKey(t, ctx, c, "orders-sender", senderKey, true)
	waitForKey(t, ctx, c, "orders-reader", newKey, false)
	if err := send(ctx, devClient(t, c), "orders", "after-update"); err != nil {
		t.Fatal(err)
	}
	if _, err := receiveOne(ctx, ruleClient(t, c, "orders-reader", *reader.PrimaryKey), "orders", "", ""); !unauthorized(err) {
		t.Fatalf("the reader's old key after the update: %v, want unauthorized", err)
	}
	if err := send(ctx, ruleClient(t, c, "orders-sender", senderKey), "orders", "dropped-sender"); !unauthorized(err) {
		t.Fatalf("the dropped sender after the update: %v, want unauthorized", err)
	}
	if body, err := receiveOne(ctx, ruleClient(t, c, "orders-reader", newKey), "orders", "", ""); err != nil || body != "after-update" {
		t.Fatalf("the reader's new key: %q, %v", body, err)
	}

	// A topic's rules serve its subscriptions.
	if _, err := ac.CreateTopic(ctx, "events", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
		AuthorizationRules: []admin.AuthorizationRule{
			{KeyName: to.Ptr("events-publisher"), AccessRights: []admin.AccessRight{admin.AccessRightSend}},
			{KeyName: to.Ptr("events-consumer"), AccessRights: []admin.AccessRight{admin.AccessRightListen}},
		},
	}}); err != nil {
		t.Fatalf("CreateTopic with rules: %v", err)
	}
	if _, err := ac.CreateSubscription(ctx, "events", "audit", nil); err != nil {
		t.Fatal(err)
	}
	topic, err := ac.GetTopic(ctx, "events", nil)
	if err != nil || topic == nil || len(topic.AuthorizationRules) != 2 {
		t.Fatalf("GetTopic: %v, %v", topic, err)
	}
	pub, sub := ruleOf(t, topic.AuthorizationRules, "events-publisher"), ruleOf(t, topic.AuthorizationRules, "events-consumer")
	waitForKey(t, ctx, c, "events-publisher", *pub.PrimaryKey, false)
	waitForKey(t, ctx, c, "events-consumer", *sub.PrimaryKey, false)
	if err := send(ctx, ruleClient(t, c, "events-publisher", *pub.PrimaryKey), "events", "event-1"); err != nil {
		t.Fatalf("the topic's Send rule: %v", err)
	}
	consumer := ruleClient(t, c, "events-consumer", *sub.PrimaryKey)
	if body, err := receiveOne(ctx, consumer, "", "events", "audit"); err != nil || body != "event-1" {
		t.Fatalf("the topic's Listen rule on its subscription: %q, %v", body, err)
	}
	if _, err := receiveOne(ctx, consumer, "orders", "", ""); !unauthorized(err) {
		t.Fatalf("the topic's Listen rule on a queue: %v, want unauthorized", err)
	}

	// A rule made as the CLI makes it (any key) is one of the topic's
	// rules for the admin client, and survives the client sending back
	// what it read.
	if _, err := pc.PutAuthorizationRule(ctx, &placementpb.PutAuthorizationRuleRequest{Rule: &placementpb.AuthorizationRule{
		Name: "cli-made", Entity: "events", Rights: uint32(sas.Listen), PrimaryKey: "cli-key",
	}}); err != nil {
		t.Fatal(err)
	}
	topic, err = ac.GetTopic(ctx, "events", nil)
	if err != nil || len(topic.AuthorizationRules) != 3 || *ruleOf(t, topic.AuthorizationRules, "cli-made").PrimaryKey != "cli-key" {
		t.Fatalf("GetTopic after a CLI rule: %v", err)
	}
	if _, err := ac.UpdateTopic(ctx, "events", topic.TopicProperties, nil); err != nil {
		t.Fatalf("UpdateTopic with what GetTopic answered: %v", err)
	}
	inCatalog, err = pc.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{Entity: "events"})
	if err != nil || len(inCatalog.GetRules()) != 3 || inCatalog.GetRules()[0].GetName() != "cli-made" || inCatalog.GetRules()[0].GetPrimaryKey() != "cli-key" {
		t.Fatalf("after the round trip the catalog holds %v, %v", inCatalog.GetRules(), err)
	}

	// What Azure refuses.
	for name, rules := range map[string][]admin.AuthorizationRule{
		"Manage alone":     {{KeyName: to.Ptr("m"), AccessRights: []admin.AccessRight{admin.AccessRightManage}}},
		"a short key":      {{KeyName: to.Ptr("k"), AccessRights: []admin.AccessRight{admin.AccessRightListen}, PrimaryKey: to.Ptr("too-short")}},
		"a name twice":     {{KeyName: to.Ptr("n"), AccessRights: []admin.AccessRight{admin.AccessRightListen}}, {KeyName: to.Ptr("N"), AccessRights: []admin.AccessRight{admin.AccessRightSend}}},
		"an unknown right": {{KeyName: to.Ptr("u"), AccessRights: []admin.AccessRight{"Read"}}},
	} {
		if _, err := ac.CreateQueue(ctx, "refused", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{AuthorizationRules: rules}}); responseStatus(err) != http.StatusBadRequest {
			t.Errorf("%s: %v, want 400", name, err)
		}
	}
	if q, err := ac.GetQueue(ctx, "refused", nil); err != nil || q != nil {
		t.Fatalf("a refused create left a queue: %v, %v", q, err)
	}
}

// TestJSAdminEntityAuthorizationRules runs js/adminauth.mjs: the
// JavaScript admin client creates a queue and a topic with rules, reads
// their keys, and the JavaScript SDK uses them per their rights, before
// and after an update that replaces them.
func TestJSAdminEntityAuthorizationRules(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startAdminDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey)
	cmd := exec.CommandContext(ctx, "node", "adminauth.mjs", conn, c.AMQPAddr)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+c.AdminCert)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript admin script failed: %v", err)
	}
}
