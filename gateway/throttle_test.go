package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// countingCatalog creates and deletes whatever it is asked to, holds
// nothing to get or list, and counts the calls that reached it.
type countingCatalog struct {
	placementpb.PlacementServiceClient
	mu    sync.Mutex // a list reads the entities and their rules at once
	calls int
}

func (c *countingCatalog) count() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
}

func (c *countingCatalog) CreateEntity(ctx context.Context, in *placementpb.CreateEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.count()
	return &placementpb.Entity{Name: in.GetName(), Kind: in.GetKind(), Properties: in.GetProperties()}, nil
}

func (c *countingCatalog) GetEntity(ctx context.Context, in *placementpb.GetEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.count()
	return nil, status.Error(codes.NotFound, "no such entity")
}

func (c *countingCatalog) DeleteEntity(ctx context.Context, in *placementpb.DeleteEntityRequest, _ ...grpc.CallOption) (*placementpb.DeleteEntityResponse, error) {
	c.count()
	return &placementpb.DeleteEntityResponse{}, nil
}

func (c *countingCatalog) ListAuthorizationRules(ctx context.Context, in *placementpb.ListAuthorizationRulesRequest, _ ...grpc.CallOption) (*placementpb.ListAuthorizationRulesResponse, error) {
	c.count()
	return &placementpb.ListAuthorizationRulesResponse{}, nil
}

func (c *countingCatalog) ListEntities(ctx context.Context, in *placementpb.ListEntitiesRequest, _ ...grpc.CallOption) (*placementpb.ListEntitiesResponse, error) {
	c.count()
	return &placementpb.ListEntitiesResponse{}, nil
}

// TestAdminThrottled: every admin request that passed the token check
// spends a management operation's 10 credits (seed 003), a create, a
// read and a page of a list alike; past the namespace's credits a
// request answers 503 with Service Bus's words in its XML error body,
// the catalog is not asked, and the request is counted against its
// entity (and exported as quorumbus_throttled_requests_total); the next
// second's credits let requests through again. A request without a
// valid token and the console spend nothing.
func TestAdminThrottled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const host = "localhost:5300"
		cat := &countingCatalog{}
		g, err := New(Config{Catalog: cat, Stats: noStats{}, Validator: RulesValidator{Rules: devRules{}},
			Credits: credits.New(credits.Config{Budget: 30})}) // three management operations a second
		if err != nil {
			t.Fatal(err)
		}
		token := sign("https://"+host+"/", sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour))
		do := func(method, path, body, auth string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, "https://"+host+path+"?api-version=2021-05", strings.NewReader(body))
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			return w
		}
		for _, tc := range []struct {
			method, path, body string
			want               int
		}{
			{http.MethodPut, "/q1", queueEntry(`<MaxDeliveryCount>3</MaxDeliveryCount>`), http.StatusCreated},
			{http.MethodGet, "/q1", "", http.StatusNotFound},
			{http.MethodGet, "/$Resources/Queues", "", http.StatusOK},
		} {
			if w := do(tc.method, tc.path, tc.body, token); w.Code != tc.want {
				t.Fatalf("%s %s within the credits: %d, want %d: %s", tc.method, tc.path, w.Code, tc.want, w.Body)
			}
		}
		if cat.calls != 4 { // a list reads the entities and their authorization rules
			t.Fatalf("%d catalog calls, want 4", cat.calls)
		}

		w := do(http.MethodDelete, "/q1", "", token)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("past the credits: %d, want 503: %s", w.Code, w.Body)
		}
		body := w.Body.String()
		for _, want := range []string{
			"<Error>", "<Code>503</Code>",
			"The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again.",
			"TrackingId:",
		} {
			if !strings.Contains(body, want) {
				t.Fatalf("throttled answer lacks %q: %s", want, body)
			}
		}
		if cat.calls != 4 {
			t.Fatal("a throttled delete reached the catalog")
		}
		if w := do(http.MethodPut, "/t/Subscriptions/s/Rules/r", "", token); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("a rule's create past the credits: %d, want 503", w.Code)
		}
		if w := do(http.MethodGet, "/q1", "", sign("https://"+host+"/", sas.DevKeyName, "not-the-key", time.Now().Add(time.Hour))); w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong key past the credits: %d, want 401", w.Code)
		}
		if w := do(http.MethodGet, consolePrefix+"/", "", ""); w.Code != http.StatusOK {
			t.Fatalf("the console past the credits: %d, want 200", w.Code)
		}
		if got := g.Throttled(); got["q1"] != 1 || got["t/Subscriptions/s"] != 1 || len(got) != 2 {
			t.Fatalf("throttled counts %v, want q1: 1, t/Subscriptions/s: 1", got)
		}
		reg := prometheus.NewRegistry() // as a gateway process registers them
		reg.MustRegister(g.Collector(), g.ThrottledCollector())
		if got := gatheredCounter(t, reg, "quorumbus_throttled_requests_total", "q1"); got != 1 {
			t.Fatalf("quorumbus_throttled_requests_total{entity=q1} = %v, want 1", got)
		}

		time.Sleep(time.Second)
		before := cat.calls // the scrape listed entities
		if w := do(http.MethodDelete, "/q1", "", token); w.Code != http.StatusOK {
			t.Fatalf("the next second: %d, want 200: %s", w.Code, w.Body)
		}
		if cat.calls != before+1 {
			t.Fatal("the next second's delete did not reach the catalog")
		}
	})
}

// gatheredCounter is the value of a counter with the entity label, or -1.
func gatheredCounter(t *testing.T, reg *prometheus.Registry, name, entity string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "entity" && l.GetValue() == entity {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestAdminNotThrottledWithoutCredits: without Config.Credits nothing
// is throttled.
func TestAdminNotThrottledWithoutCredits(t *testing.T) {
	cat := &countingCatalog{}
	g, err := New(Config{Catalog: cat, Stats: noStats{}, Validator: RulesValidator{Rules: devRules{}}})
	if err != nil {
		t.Fatal(err)
	}
	token := sign("https://gw.test/", sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour))
	for i := range 500 {
		r := httptest.NewRequest(http.MethodGet, "https://gw.test/q", nil)
		r.Header.Set("Authorization", token)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusNotFound {
			t.Fatalf("request %d: %d, want 404", i, w.Code)
		}
	}
	if len(g.Throttled()) != 0 {
		t.Fatalf("counted %v without credits", g.Throttled())
	}
}

// TestThrottledEntity: what a request is counted against, by its path.
func TestThrottledEntity(t *testing.T) {
	for path, want := range map[string]string{
		"/orders":                           "orders",
		"/a/b":                              "a/b", // an entity name may hold slashes
		"/t/Subscriptions":                  "t",
		"/t/subscriptions/s":                "t/subscriptions/s",
		"/t/Subscriptions/s/Rules":          "t/Subscriptions/s",
		"/t/Subscriptions/s/Rules/$Default": "t/Subscriptions/s",
		"/$Resources/Queues":                namespaceEntity,
		"/$namespaceinfo":                   namespaceEntity,
		"/":                                 namespaceEntity,
	} {
		if got := throttledEntity(path); got != want {
			t.Errorf("throttledEntity(%q) = %q, want %q", path, got, want)
		}
	}
}
