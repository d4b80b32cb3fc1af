package compat

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// These tests drive topics, subscriptions and rules through the official
// Go admin client against a dev cluster, as admin_test.go does queues.

func TestAdminTopicLifecycle(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	created, err := ac.CreateTopic(ctx, "events", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
		DefaultMessageTimeToLive:            to.Ptr("PT1H"),
		RequiresDuplicateDetection:          to.Ptr(true),
		DuplicateDetectionHistoryTimeWindow: to.Ptr("PT5M"),
		MaxSizeInMegabytes:                  to.Ptr(int32(2048)),
		MaxMessageSizeInKilobytes:           to.Ptr(int64(512)),
		UserMetadata:                        to.Ptr("owner: team 'checkout'"),
	}})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	p := created.TopicProperties
	if *p.DefaultMessageTimeToLive != "PT1H" || !*p.RequiresDuplicateDetection || *p.DuplicateDetectionHistoryTimeWindow != "PT5M" ||
		*p.MaxSizeInMegabytes != 2048 || *p.MaxMessageSizeInKilobytes != 512 || *p.UserMetadata != "owner: team 'checkout'" || *p.EnablePartitioning || *p.Status != admin.EntityStatusActive {
		t.Fatalf("created topic = %+v", p)
	}
	if _, err := ac.CreateTopic(ctx, "events", nil); responseStatus(err) != http.StatusConflict {
		t.Fatalf("second CreateTopic: %v, want 409", err)
	}
	// A topic and a queue share the namespace's names.
	if _, err := ac.CreateQueue(ctx, "events", nil); responseStatus(err) != http.StatusConflict {
		t.Fatalf("CreateQueue over a topic: %v, want 409", err)
	}
	got, err := ac.GetTopic(ctx, "events", nil)
	if err != nil || got == nil || got.TopicName != "events" || !reflect.DeepEqual(got.TopicProperties, p) {
		t.Fatalf("GetTopic = %+v, %v; want %+v", got, err, p)
	}

	// An update replaces the description; what was read can be sent back.
	upd := got.TopicProperties
	upd.DefaultMessageTimeToLive = to.Ptr("PT2H")
	upd.Status = to.Ptr(admin.EntityStatusSendDisabled)
	updated, err := ac.UpdateTopic(ctx, "events", upd, nil)
	if err != nil || *updated.DefaultMessageTimeToLive != "PT2H" || *updated.Status != admin.EntityStatusSendDisabled {
		t.Fatalf("UpdateTopic = %+v, %v", updated, err)
	}
	immutable := upd
	immutable.EnablePartitioning = to.Ptr(true)
	if _, err := ac.UpdateTopic(ctx, "events", immutable, nil); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("UpdateTopic changing EnablePartitioning: %v, want 400", err)
	}
	if _, err := ac.UpdateTopic(ctx, "missing", upd, nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("UpdateTopic of a missing topic: %v, want 404", err)
	}
	if _, err := ac.CreateTopic(ctx, "bad", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{AutoDeleteOnIdle: to.Ptr("PT10M")}}); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("CreateTopic with idle deletion: %v, want 400", err)
	}

	// Subscriptions and their filters add up in the runtime properties.
	if _, err := ac.CreateSubscription(ctx, "events", "all", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "events", "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.SQLFilter{Expression: "color = 'red'"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateRule(ctx, "events", "red", &admin.CreateRuleOptions{Name: to.Ptr("corr"), Filter: &admin.CorrelationFilter{Subject: to.Ptr("s")}}); err != nil {
		t.Fatal(err)
	}
	rt, err := ac.GetTopicRuntimeProperties(ctx, "events", nil)
	if err != nil || rt == nil {
		t.Fatalf("GetTopicRuntimeProperties: %+v, %v", rt, err)
	}
	if r := rt.TopicRuntimeProperties; r.SubscriptionCount != 2 || r.SQLFilterCount != 1 || r.CorrelationFilterCount != 1 ||
		r.SizeInBytes != 0 || r.ScheduledMessageCount != 0 || r.CreatedAt.IsZero() || r.UpdatedAt.Before(r.CreatedAt) {
		t.Fatalf("topic runtime properties = %+v; want 2 subscriptions, 1 SQL and 1 correlation filter, nothing stored", r)
	}

	if _, err := ac.DeleteTopic(ctx, "events", nil); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if got, err := ac.GetTopic(ctx, "events", nil); err != nil || got != nil {
		t.Fatalf("GetTopic after delete = %+v, %v; want nil", got, err)
	}
	// Its subscriptions went with it.
	if s, err := ac.GetSubscription(ctx, "events", "all", nil); err != nil || s != nil {
		t.Fatalf("GetSubscription after its topic's delete = %+v, %v; want nil", s, err)
	}
	if _, err := ac.DeleteTopic(ctx, "events", nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("second DeleteTopic: %v, want 404", err)
	}
}

func TestAdminListTopicsAndSubscriptionsInPages(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var topics []string
	for i := range 5 {
		name := fmt.Sprintf("t%d", i)
		if _, err := ac.CreateTopic(ctx, name, nil); err != nil {
			t.Fatalf("CreateTopic %s: %v", name, err)
		}
		topics = append(topics, name)
	}
	// A queue is not listed among topics.
	if _, err := ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	var names []string
	pages := 0
	pager := ac.NewListTopicsPager(&admin.ListTopicsOptions{MaxPageSize: 2})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Topics) > 0 {
			pages++
		}
		for _, tp := range page.Topics {
			names = append(names, tp.TopicName)
		}
	}
	if !slices.Equal(names, topics) || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", names, pages, topics)
	}
	var rtNames []string
	rt := ac.NewListTopicsRuntimePropertiesPager(&admin.ListTopicsRuntimePropertiesOptions{MaxPageSize: 3})
	for rt.More() {
		page, err := rt.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range page.TopicRuntimeProperties {
			rtNames = append(rtNames, tp.TopicName)
		}
	}
	if !slices.Equal(rtNames, topics) {
		t.Fatalf("runtime list %v, want %v", rtNames, topics)
	}

	// Subscriptions of t1 only, in pages; t2's are not among them.
	var subs []string
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		if _, err := ac.CreateSubscription(ctx, "t1", name, nil); err != nil {
			t.Fatalf("CreateSubscription %s: %v", name, err)
		}
		subs = append(subs, name)
	}
	if _, err := ac.CreateSubscription(ctx, "t2", "other", nil); err != nil {
		t.Fatal(err)
	}
	names, pages = nil, 0
	sp := ac.NewListSubscriptionsPager("t1", &admin.ListSubscriptionsOptions{MaxPageSize: 2})
	for sp.More() {
		page, err := sp.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Subscriptions) > 0 {
			pages++
		}
		for _, s := range page.Subscriptions {
			if s.TopicName != "t1" {
				t.Errorf("%s listed under topic %q", s.SubscriptionName, s.TopicName)
			}
			names = append(names, s.SubscriptionName)
		}
	}
	if !slices.Equal(names, subs) || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", names, pages, subs)
	}
	names = nil
	srt := ac.NewListSubscriptionsRuntimePropertiesPager("t1", nil)
	for srt.More() {
		page, err := srt.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.SubscriptionRuntimeProperties {
			names = append(names, s.SubscriptionName)
		}
	}
	if !slices.Equal(names, subs) {
		t.Fatalf("runtime list %v, want %v", names, subs)
	}
	page, err := ac.NewListSubscriptionsPager("missing", nil).NextPage(ctx)
	if responseStatus(err) != http.StatusNotFound {
		t.Fatalf("listing a missing topic's subscriptions: %+v, %v; want 404", page, err)
	}
}

func TestAdminSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ac.CreateTopic(ctx, "orders", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{EnablePartitioning: to.Ptr(true)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "missing", "s", nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("CreateSubscription on a missing topic: %v, want 404", err)
	}

	created, err := ac.CreateSubscription(ctx, "orders", "audit", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		LockDuration:                                    to.Ptr("PT45S"),
		MaxDeliveryCount:                                to.Ptr(int32(3)),
		DefaultMessageTimeToLive:                        to.Ptr("PT10M"),
		DeadLetteringOnMessageExpiration:                to.Ptr(true),
		EnableDeadLetteringOnFilterEvaluationExceptions: to.Ptr(false),
		UserMetadata:                                    to.Ptr("audit trail"),
	}})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	p := created.SubscriptionProperties
	if *p.LockDuration != "PT45S" || *p.MaxDeliveryCount != 3 || *p.DefaultMessageTimeToLive != "PT10M" ||
		!*p.DeadLetteringOnMessageExpiration || *p.EnableDeadLetteringOnFilterEvaluationExceptions || *p.RequiresSession ||
		p.UserMetadata == nil || *p.UserMetadata != "audit trail" ||
		*p.Status != admin.EntityStatusActive {
		t.Fatalf("created subscription = %+v", p)
	}
	if _, err := ac.CreateSubscription(ctx, "orders", "audit", nil); responseStatus(err) != http.StatusConflict {
		t.Fatalf("second CreateSubscription: %v, want 409", err)
	}
	// Without a default rule given, the subscription gets $Default, a
	// true filter, as on Service Bus.
	rules := listRules(ctx, t, ac, "orders", "audit")
	if len(rules) != 1 || rules[0].Name != "$Default" || !isTrueFilter(rules[0].Filter) || rules[0].Action != nil {
		t.Fatalf("rules of a subscription created without one = %+v", rules)
	}

	got, err := ac.GetSubscription(ctx, "orders", "audit", nil)
	if err != nil || got == nil || got.SubscriptionName != "audit" || got.TopicName != "orders" {
		t.Fatalf("GetSubscription = %+v, %v", got, err)
	}
	upd := got.SubscriptionProperties
	// The Go client does not send a subscription's Status (v1.11.0's
	// newSubscriptionEnvelope leaves it out), so only the rest changes.
	upd.MaxDeliveryCount = to.Ptr(int32(7))
	updated, err := ac.UpdateSubscription(ctx, "orders", "audit", upd, nil)
	if err != nil || *updated.MaxDeliveryCount != 7 || *updated.LockDuration != "PT45S" {
		t.Fatalf("UpdateSubscription = %d %s %s, %v", *updated.MaxDeliveryCount, *updated.Status, *updated.LockDuration, err)
	}
	again, err := ac.GetSubscription(ctx, "orders", "audit", nil)
	if err != nil || *again.MaxDeliveryCount != 7 || *again.DefaultMessageTimeToLive != "PT10M" {
		t.Fatalf("GetSubscription after update = %+v, %v", again, err)
	}
	sessions := upd
	sessions.RequiresSession = to.Ptr(true)
	if _, err := ac.UpdateSubscription(ctx, "orders", "audit", sessions, nil); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("UpdateSubscription changing RequiresSession: %v, want 400", err)
	}
	if _, err := ac.UpdateSubscription(ctx, "orders", "missing", upd, nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("UpdateSubscription of a missing one: %v, want 404", err)
	}
	// Auto-forwarding: to a queue that may not exist yet is taken; to a
	// topic (here its own) is refused.
	if fwd, err := ac.CreateSubscription(ctx, "orders", "fwd", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr("elsewhere")}}); err != nil || fwd.ForwardTo == nil || *fwd.ForwardTo != "elsewhere" {
		t.Fatalf("CreateSubscription with ForwardTo a queue: %+v, %v", fwd, err)
	}
	if _, err := ac.CreateSubscription(ctx, "orders", "loop", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr("orders")}}); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("CreateSubscription forwarding to its own topic: %v, want 400", err)
	}

	// A default rule given at creation replaces $Default.
	if _, err := ac.CreateSubscription(ctx, "orders", "big", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{
			Name:   "big-ones",
			Filter: &admin.SQLFilter{Expression: "amount > @min", Parameters: map[string]any{"@min": int64(100)}},
			Action: &admin.SQLAction{Expression: "SET tier = 'gold'"},
		},
	}}); err != nil {
		t.Fatalf("CreateSubscription with a default rule: %v", err)
	}
	rules = listRules(ctx, t, ac, "orders", "big")
	want := admin.RuleProperties{
		Name:   "big-ones",
		Filter: &admin.SQLFilter{Expression: "amount > @min", Parameters: map[string]any{"@min": int64(100)}},
		Action: &admin.SQLAction{Expression: "SET tier = 'gold'"},
	}
	if len(rules) != 1 || !reflect.DeepEqual(rules[0], want) {
		t.Fatalf("rules = %+v; want %+v", rules, want)
	}
	if _, err := ac.CreateSubscription(ctx, "orders", "broken", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Filter: &admin.SQLFilter{Expression: "amount >"}},
	}}); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("CreateSubscription with a default rule that does not parse: %v, want 400", err)
	}
	if s, err := ac.GetSubscription(ctx, "orders", "broken", nil); err != nil || s != nil {
		t.Fatalf("a refused subscription exists: %+v, %v", s, err)
	}

	// Runtime counts come from the subscription's partitions (16: the
	// topic is partitioned); nothing is sent, so all are zero.
	rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "orders", "audit", nil)
	if err != nil || rt == nil {
		t.Fatalf("GetSubscriptionRuntimeProperties: %+v, %v", rt, err)
	}
	if r := rt.SubscriptionRuntimeProperties; r.TotalMessageCount != 0 || r.ActiveMessageCount != 0 || r.DeadLetterMessageCount != 0 || r.CreatedAt.IsZero() {
		t.Fatalf("subscription runtime properties = %+v", r)
	}

	if _, err := ac.DeleteSubscription(ctx, "orders", "audit", nil); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	if s, err := ac.GetSubscription(ctx, "orders", "audit", nil); err != nil || s != nil {
		t.Fatalf("GetSubscription after delete = %+v, %v", s, err)
	}
	if _, err := ac.DeleteSubscription(ctx, "orders", "audit", nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("second DeleteSubscription: %v, want 404", err)
	}
	if rp, err := ac.GetSubscriptionRuntimeProperties(ctx, "orders", "audit", nil); err != nil || rp != nil {
		t.Fatalf("runtime properties of a deleted subscription = %+v, %v", rp, err)
	}
}

func TestAdminRules(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ac.CreateTopic(ctx, "shop", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "shop", "sub", nil); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	rules := []admin.RuleProperties{
		{Name: "sql", Filter: &admin.SQLFilter{
			Expression: "color = @c AND size > @n AND price < @p AND urgent = @u AND sent > @t",
			Parameters: map[string]any{"@c": "red", "@n": int64(3), "@p": 9.5, "@u": true, "@t": when},
		}},
		{Name: "corr", Filter: &admin.CorrelationFilter{
			CorrelationID: to.Ptr("cid"), MessageID: to.Ptr("mid"), To: to.Ptr("to"), ReplyTo: to.Ptr("rt"),
			Subject: to.Ptr("subj"), SessionID: to.Ptr("sid"), ReplyToSessionID: to.Ptr("rsid"), ContentType: to.Ptr("text/plain"),
			ApplicationProperties: map[string]any{"region": "eu", "priority": int64(2), "vip": false},
		}},
		{Name: "yes", Filter: &admin.TrueFilter{}},
		{Name: "no", Filter: &admin.FalseFilter{}},
		{Name: "act", Filter: &admin.SQLFilter{Expression: "1=1"}, Action: &admin.SQLAction{
			Expression: "SET tier = @tier; REMOVE secret", Parameters: map[string]any{"@tier": "gold"},
		}},
	}
	for _, r := range rules {
		created, err := ac.CreateRule(ctx, "shop", "sub", &admin.CreateRuleOptions{Name: to.Ptr(r.Name), Filter: r.Filter, Action: r.Action})
		if err != nil {
			t.Fatalf("CreateRule %s: %v", r.Name, err)
		}
		if !reflect.DeepEqual(created.RuleProperties, r) {
			t.Errorf("created %s = %s; want %s", r.Name, show(created.RuleProperties), show(r))
		}
		got, err := ac.GetRule(ctx, "shop", "sub", r.Name, nil)
		if err != nil || got == nil || !reflect.DeepEqual(got.RuleProperties, r) {
			t.Errorf("GetRule %s = %+v, %v; want %s", r.Name, got, err, show(r))
		}
	}
	if _, err := ac.CreateRule(ctx, "shop", "sub", &admin.CreateRuleOptions{Name: to.Ptr("sql"), Filter: &admin.TrueFilter{}}); responseStatus(err) != http.StatusConflict {
		t.Fatalf("second CreateRule: %v, want 409", err)
	}
	// A filter that does not parse is refused with where it failed.
	_, err := ac.CreateRule(ctx, "shop", "sub", &admin.CreateRuleOptions{Name: to.Ptr("bad"), Filter: &admin.SQLFilter{Expression: "color = = 'red'"}})
	if responseStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "position 9") {
		t.Fatalf("CreateRule with a filter that does not parse: %v; want 400 naming position 9", err)
	}
	if _, err := ac.CreateRule(ctx, "shop", "missing", &admin.CreateRuleOptions{Name: to.Ptr("r"), Filter: &admin.TrueFilter{}}); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("CreateRule on a missing subscription: %v, want 404", err)
	}
	if r, err := ac.GetRule(ctx, "shop", "sub", "missing", nil); err != nil || r != nil {
		t.Fatalf("GetRule of a missing rule = %+v, %v; want nil", r, err)
	}

	names := []string{}
	for _, r := range listRules(ctx, t, ac, "shop", "sub") {
		names = append(names, r.Name)
	}
	if want := []string{"$Default", "act", "corr", "no", "sql", "yes"}; !slices.Equal(names, want) {
		t.Fatalf("ListRules = %v, want %v", names, want)
	}
	var paged []string
	pager := ac.NewListRulesPager("shop", "sub", &admin.ListRulesOptions{MaxPageSize: 4})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Rules {
			paged = append(paged, r.Name)
		}
	}
	if !slices.Equal(paged, names) {
		t.Fatalf("ListRules in pages of 4 = %v, want %v", paged, names)
	}

	// UpdateRule replaces the filter and action.
	repl := admin.RuleProperties{Name: "sql", Filter: &admin.SQLFilter{Expression: "color = 'blue'"}, Action: &admin.SQLAction{Expression: "SET seen = TRUE"}}
	updated, err := ac.UpdateRule(ctx, "shop", "sub", repl)
	if err != nil || !reflect.DeepEqual(updated.RuleProperties, repl) {
		t.Fatalf("UpdateRule = %+v, %v; want %s", updated, err, show(repl))
	}
	if got, err := ac.GetRule(ctx, "shop", "sub", "sql", nil); err != nil || !reflect.DeepEqual(got.RuleProperties, repl) {
		t.Fatalf("GetRule after update = %+v, %v", got, err)
	}
	// A replacement that does not compile leaves the rule as it was.
	_, err = ac.UpdateRule(ctx, "shop", "sub", admin.RuleProperties{Name: "sql", Filter: &admin.SQLFilter{Expression: "color ="}})
	if responseStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "position") {
		t.Fatalf("UpdateRule with a filter that does not parse: %v; want 400 with the position", err)
	}
	if got, err := ac.GetRule(ctx, "shop", "sub", "sql", nil); err != nil || got == nil || !reflect.DeepEqual(got.RuleProperties, repl) {
		t.Fatalf("GetRule after a refused update = %+v, %v; want %s", got, err, show(repl))
	}
	if _, err := ac.UpdateRule(ctx, "shop", "sub", admin.RuleProperties{Name: "missing", Filter: &admin.TrueFilter{}}); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("UpdateRule of a missing rule: %v, want 404", err)
	}

	if _, err := ac.DeleteRule(ctx, "shop", "sub", "corr", nil); err != nil {
		t.Fatalf("DeleteRule: %v", err)
	}
	if r, err := ac.GetRule(ctx, "shop", "sub", "corr", nil); err != nil || r != nil {
		t.Fatalf("GetRule after delete = %+v, %v", r, err)
	}
	if _, err := ac.DeleteRule(ctx, "shop", "sub", "corr", nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("second DeleteRule: %v, want 404", err)
	}

	// Without a valid key nothing is read or changed.
	wrong := adminClient(t, c, sas.DevKeyName, "not-the-key")
	for what, call := range map[string]func() error{
		"GetTopic":           func() error { _, err := wrong.GetTopic(ctx, "shop", nil); return err },
		"CreateSubscription": func() error { _, err := wrong.CreateSubscription(ctx, "shop", "x", nil); return err },
		"GetRule":            func() error { _, err := wrong.GetRule(ctx, "shop", "sub", "sql", nil); return err },
		"DeleteRule":         func() error { _, err := wrong.DeleteRule(ctx, "shop", "sub", "sql", nil); return err },
	} {
		if err := call(); responseStatus(err) != http.StatusUnauthorized {
			t.Errorf("%s with a wrong key: %v, want 401", what, err)
		}
	}
	if got, err := ac.GetRule(ctx, "shop", "sub", "sql", nil); err != nil || got == nil {
		t.Fatalf("the rule after refused calls = %+v, %v", got, err)
	}
}

func listRules(ctx context.Context, t *testing.T, ac *admin.Client, topic, sub string) []admin.RuleProperties {
	t.Helper()
	var out []admin.RuleProperties
	pager := ac.NewListRulesPager(topic, sub, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("ListRules %s/%s: %v", topic, sub, err)
		}
		out = append(out, page.Rules...)
	}
	return out
}

func isTrueFilter(f admin.RuleFilter) bool {
	_, ok := f.(*admin.TrueFilter)
	return ok
}

// show writes a rule with its filter and action, which %+v prints as
// pointers.
func show(r admin.RuleProperties) string {
	return fmt.Sprintf("{%s %+v %+v}", r.Name, r.Filter, r.Action)
}

// TestJSAdminTopics runs js/admintopics.mjs: topics, subscriptions and
// rules through the JavaScript admin client.
func TestJSAdminTopics(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startAdminDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey)
	cmd := exec.CommandContext(ctx, "node", "admintopics.mjs", conn)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+c.AdminCert)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript admin script failed: %v", err)
	}
}

// TestAdminTopicMetrics: /metrics carries topics and subscriptions as it
// does queues, a subscription under its catalog name.
func TestAdminTopicMetrics(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ac.CreateTopic(ctx, "metered-topic", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "metered-topic", "sub", nil); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, c.Admin.Addr())
	for _, entity := range []string{"metered-topic", "metered-topic/Subscriptions/sub"} {
		for _, name := range []string{"quorumbus_active_messages", "quorumbus_dead_lettered_messages", "quorumbus_size_bytes"} {
			if v, ok := value(fams, name, map[string]string{"entity": entity}); !ok || v != 0 {
				t.Errorf("%s{entity=%q} = %v (present %t), want 0", name, entity, v, ok)
			}
		}
		// Degraded may be 1 while the groups still elect after the start.
		if _, ok := value(fams, "quorumbus_entity_degraded", map[string]string{"entity": entity}); !ok {
			t.Errorf("no quorumbus_entity_degraded{entity=%q}", entity)
		}
	}
	if v, ok := value(fams, "quorumbus_entity_scrape_errors", nil); !ok || v != 0 {
		t.Errorf("scrape errors = %v (present %t)", v, ok)
	}
}

// BenchmarkAdminRules measures, through the Go admin client against a dev
// cluster, adding and removing a rule (two catalog commits), replacing
// one (UpdateRule: a remove and an add in the gateway), reading a
// subscription's runtime properties, and listing a topic's subscriptions
// when the namespace holds QUORUMBUS_BENCH_SUBSCRIPTIONS (default 200).
func BenchmarkAdminRules(b *testing.B) {
	n := 200
	if v := os.Getenv("QUORUMBUS_BENCH_SUBSCRIPTIONS"); v != "" {
		fmt.Sscan(v, &n)
	}
	c := startAdminDev(b)
	ac := adminClient(b, c, sas.DevKeyName, sas.DevKey)
	ctx := context.Background()
	if _, err := ac.CreateTopic(ctx, "bench", nil); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := ac.CreateSubscription(ctx, "bench", fmt.Sprintf("s%04d", i), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("create-delete-rule", func(b *testing.B) {
		for range b.N {
			if _, err := ac.CreateRule(ctx, "bench", "s0000", &admin.CreateRuleOptions{Name: to.Ptr("r"), Filter: &admin.SQLFilter{Expression: "a = 1"}}); err != nil {
				b.Fatal(err)
			}
			if _, err := ac.DeleteRule(ctx, "bench", "s0000", "r", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("update-rule", func(b *testing.B) {
		for i := range b.N {
			if _, err := ac.UpdateRule(ctx, "bench", "s0000", admin.RuleProperties{Name: "$Default", Filter: &admin.SQLFilter{Expression: fmt.Sprintf("a = %d", i)}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("subscription-runtime", func(b *testing.B) {
		for range b.N {
			if rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "bench", "s0001", nil); err != nil || rt == nil {
				b.Fatal(rt, err)
			}
		}
	})
	b.Run("list-subscriptions", func(b *testing.B) {
		for range b.N {
			got := 0
			p := ac.NewListSubscriptionsPager("bench", nil)
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got += len(page.Subscriptions)
			}
			if got != n {
				b.Fatalf("listed %d subscriptions, want %d", got, n)
			}
		}
	})
}
