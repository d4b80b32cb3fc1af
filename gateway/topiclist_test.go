package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// listingCatalog lists topics and their subscriptions as the catalog
// does, and records what it was asked.
type listingCatalog struct {
	placementpb.PlacementServiceClient
	topics []*placementpb.Entity
	subs   map[string][]*placementpb.Entity

	mu    sync.Mutex
	asked []string
	// predatesTopics: answers every subscription to a request naming
	// topics, as a member that predates the field does.
	predatesTopics bool
}

func (c *listingCatalog) ListEntities(ctx context.Context, in *placementpb.ListEntitiesRequest, _ ...grpc.CallOption) (*placementpb.ListEntitiesResponse, error) {
	c.mu.Lock()
	c.asked = append(c.asked, fmt.Sprintf("%v %q %q", in.GetKind(), in.GetTopic(), in.GetTopics()))
	old := c.predatesTopics
	c.mu.Unlock()
	switch {
	case in.GetKind() == placementpb.EntityKind_ENTITY_KIND_TOPIC:
		es := c.topics[min(int(in.GetSkip()), len(c.topics)):]
		return &placementpb.ListEntitiesResponse{Entities: es[:min(int(in.GetTop()), len(es))]}, nil
	case in.GetTopic() != "":
		return &placementpb.ListEntitiesResponse{Entities: c.subs[in.GetTopic()]}, nil
	case len(in.GetTopics()) > 0 && !old:
		var subs []*placementpb.Entity
		for _, t := range in.GetTopics() {
			subs = append(subs, c.subs[t]...)
		}
		return &placementpb.ListEntitiesResponse{Entities: subs}, nil
	}
	var all []*placementpb.Entity
	for _, t := range c.topics {
		all = append(all, c.subs[t.GetName()]...)
	}
	return &placementpb.ListEntitiesResponse{Entities: all}, nil
}

// ListAuthorizationRules answers that no entity has rules.
func (c *listingCatalog) ListAuthorizationRules(context.Context, *placementpb.ListAuthorizationRulesRequest, ...grpc.CallOption) (*placementpb.ListAuthorizationRulesResponse, error) {
	return &placementpb.ListAuthorizationRulesResponse{}, nil
}

// zeroStats answers every counter with zeros.
type zeroStats struct{}

func (zeroStats) Stats(context.Context, *placementpb.Entity, uint32) (*partitionpb.StatsResponse, error) {
	return &partitionpb.StatsResponse{}, nil
}

func (zeroStats) GroupStats(_ context.Context, _ uint64, refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error) {
	out := make([]*partitionpb.EntityPartitionStats, len(refs))
	for i, r := range refs {
		out[i] = &partitionpb.EntityPartitionStats{EntityId: r.GetEntityId(), Partition: r.GetPartition(), Stats: &partitionpb.StatsResponse{}}
	}
	return out, nil
}

// TestListTopicsReadsThePageSubscriptions: a page of topics asks the
// catalog for the subscriptions of its own topics, in one call, not for
// every subscription of the namespace, and counts them and their
// filters right; also when the catalog member predates the request's
// topics and answers every subscription. A topic whose name holds '/'
// is told apart from the topic its name starts with.
func TestListTopicsReadsThePageSubscriptions(t *testing.T) {
	cat := &listingCatalog{subs: map[string][]*placementpb.Entity{}}
	for i := range 6 {
		name := fmt.Sprintf("t%d", i)
		cat.topics = append(cat.topics, &placementpb.Entity{Id: uint64(i + 1), Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC,
			PartitionGroups: []uint64{1}, Properties: &placementpb.QueueProperties{}})
		for j := range i {
			cat.subs[name] = append(cat.subs[name], &placementpb.Entity{Name: subscriptionName(name, fmt.Sprint(j)), Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
				Rules: []*placementpb.Rule{{Name: "r", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "1=1"}}}}})
		}
	}
	// t3/x sorts after t3 and has subscriptions of its own.
	cat.topics = slices.Insert(cat.topics, 4, &placementpb.Entity{Id: 99, Name: "t3/x", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC,
		PartitionGroups: []uint64{1}, Properties: &placementpb.QueueProperties{}})
	cat.subs["t3/x"] = []*placementpb.Entity{{Name: subscriptionName("t3/x", "only"), Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION}}
	g, err := New(Config{Catalog: cat, Stats: zeroStats{}, Validator: RulesValidator{Rules: devRules{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, predates := range []bool{false, true} {
		cat.predatesTopics, cat.asked = predates, nil
		r := httptest.NewRequest(http.MethodGet, "https://ns.test/$Resources/Topics?api-version=2024-05&$skip=2&$top=4", nil)
		r.Header.Set("Authorization", sign("https://ns.test/", sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour)))
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		body := w.Body.String()
		counts := regexp.MustCompile(`<title type="text">(t\d[^<]*)</title>.*?<SubscriptionCount>(\d+)</SubscriptionCount><SqlFilterCount>(\d+)</SqlFilterCount>`).FindAllStringSubmatch(body, -1)
		var got []string
		for _, m := range counts {
			got = append(got, strings.Join(m[1:], " "))
		}
		if want := []string{"t2 2 2", "t3 3 3", "t3/x 1 0", "t4 4 4"}; !slices.Equal(got, want) {
			t.Errorf("predating topics %t: topics, subscriptions, SQL filters %q, want %q\n%s", predates, got, want, body)
		}
		want := []string{`ENTITY_KIND_TOPIC "" []`, `ENTITY_KIND_SUBSCRIPTION "" ["t2" "t3" "t3/x" "t4"]`}
		if !slices.Equal(cat.asked, want) {
			t.Errorf("asked the catalog %q, want %q", cat.asked, want)
		}
	}
}
