package gateway

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// goSDKRule has the XML tags of the Go admin client's rule
// (azservicebus v1.11.0 internal/atom.AuthorizationRule), so that
// encoding/xml writes what that client sends.
type goSDKRule struct {
	XMLName      xml.Name   `xml:"AuthorizationRule"`
	Type         string     `xml:"http://www.w3.org/2001/XMLSchema-instance type,attr"`
	ClaimType    string     `xml:"ClaimType"`
	ClaimValue   string     `xml:"ClaimValue"`
	Rights       []string   `xml:"Rights>AccessRights"`
	KeyName      *string    `xml:"KeyName"`
	CreatedTime  *time.Time `xml:"CreatedTime"`
	ModifiedTime *time.Time `xml:"ModifiedTime"`
	PrimaryKey   *string    `xml:"PrimaryKey"`
	SecondaryKey *string    `xml:"SecondaryKey"`
}

func goSDKRules(t *testing.T, rules ...goSDKRule) string {
	t.Helper()
	b, err := xml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	return "<AuthorizationRules>" + string(b) + "</AuthorizationRules>"
}

var (
	keyA = sas.NewKey()
	keyB = sas.NewKey()
)

func decodeQueueRules(t *testing.T, props string) (rulesRequest, error) {
	t.Helper()
	_, fields, err := DecodeEntry([]byte(queueEntry(props)))
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodeQueue(fields)
	return q.rules, err
}

// TestDecodeAuthorizationRules reads the rules as each client writes
// them: the Go client (its own xsi prefix, times it read back), the
// JavaScript client (prefix p5, keys left out) and the .NET client (xsi
// declared on the description, every element given).
func TestDecodeAuthorizationRules(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	goForm := goSDKRules(t,
		goSDKRule{Type: sasRuleType, ClaimType: "SharedAccessKey", ClaimValue: "None", Rights: []string{"Listen", "Send"},
			KeyName: ptr("app"), PrimaryKey: ptr(keyA), CreatedTime: &created, ModifiedTime: &created},
		goSDKRule{Type: sasRuleType, ClaimType: "SharedAccessKey", ClaimValue: "None", Rights: []string{"Manage", "Listen", "Send"}, KeyName: ptr("admin")},
	)
	if !strings.Contains(goForm, `XMLSchema-instance:type="SharedAccessAuthorizationRule"`) {
		t.Fatalf("the Go client's form is not as expected: %s", goForm)
	}
	jsForm := `<AuthorizationRules><AuthorizationRule p5:type="SharedAccessAuthorizationRule" xmlns:p5="` + xsiNS + `">` +
		`<ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights>` +
		`<KeyName>app</KeyName><PrimaryKey>` + keyA + `</PrimaryKey></AuthorizationRule>` +
		`<AuthorizationRule p5:type="SharedAccessAuthorizationRule" xmlns:p5="` + xsiNS + `"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>` +
		`<Rights><AccessRights>Manage</AccessRights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights><KeyName>admin</KeyName></AuthorizationRule></AuthorizationRules>`
	dotnetForm := `<AuthorizationRules><AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>` +
		`<Rights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights><KeyName>app</KeyName><PrimaryKey>` + keyA + `</PrimaryKey><SecondaryKey i:nil="true"/></AuthorizationRule>` +
		`<AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>` +
		`<Rights><AccessRights>Manage</AccessRights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights><KeyName>admin</KeyName><PrimaryKey></PrimaryKey></AuthorizationRule></AuthorizationRules>`
	want := []*placementpb.AuthorizationRule{
		{Name: "app", Rights: uint32(sas.Listen | sas.Send), PrimaryKey: keyA},
		{Name: "admin", Rights: uint32(sas.Listen | sas.Send | sas.Manage)},
	}
	for name, props := range map[string]string{"go": goForm, "js": jsForm, "dotnet": dotnetForm} {
		got, err := decodeQueueRules(t, props)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.given || len(got.rules) != len(want) {
			t.Fatalf("%s: %+v", name, got)
		}
		for i := range want {
			if !proto.Equal(got.rules[i], want[i]) {
				t.Errorf("%s: rule %d = %v, want %v", name, i, got.rules[i], want[i])
			}
		}
	}

	none, err := decodeQueueRules(t, capturedCreate[strings.Index(capturedCreate, "<RequiresSession>"):strings.Index(capturedCreate, "</QueueDescription>")])
	if err != nil || !none.given || len(none.rules) != 0 {
		t.Fatalf("the captured empty element: %+v, %v (want given, no rules)", none, err)
	}
	if absent, err := decodeQueueRules(t, `<MaxDeliveryCount>3</MaxDeliveryCount>`); err != nil || absent.given {
		t.Fatalf("no element: %+v, %v (want not given)", absent, err)
	}
	_, fields, err := DecodeEntry([]byte(topicEntry(jsForm)))
	if err != nil {
		t.Fatal(err)
	}
	if tr, err := DecodeTopic(fields); err != nil || len(tr.rules.rules) != 2 {
		t.Fatalf("a topic's rules: %+v, %v", tr.rules, err)
	}
}

func topicEntry(props string) string {
	return `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><TopicDescription xmlns="` + sbNS + `" xmlns:i="` + xsiNS + `">` + props + `</TopicDescription></content></entry>`
}

// rule writes one rule as the .NET client does.
func rule(name string, rights ...string) string {
	var r strings.Builder
	for _, x := range rights {
		r.WriteString("<AccessRights>" + x + "</AccessRights>")
	}
	return `<AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue><Rights>` +
		r.String() + `</Rights><KeyName>` + name + `</KeyName></AuthorizationRule>`
}

// TestDecodeAuthorizationRulesRefuses: what Service Bus refuses is 400
// with the reason, naming the rule and never a key.
func TestDecodeAuthorizationRulesRefuses(t *testing.T) {
	secret := sas.NewKey()
	many := ""
	for i := range sas.MaxRulesPerScope + 1 {
		many += rule(fmt.Sprintf("r%d", i), "Listen")
	}
	for _, tc := range []struct{ name, rules, reason string }{
		{"manage alone", rule("m", "Manage"), `rule "m": Rights: Manage requires Listen and Send`},
		{"manage and listen", rule("m", "Manage", "Listen"), "Manage requires Listen and Send"},
		{"a right twice", rule("l", "Listen", "Listen"), "Listen given twice"},
		{"unknown right", rule("l", "Read"), `"Read" is not Listen, Send or Manage`},
		{"no rights", rule("l"), "no Rights"},
		{"no name", rule("", "Listen"), "rule 1: no KeyName"},
		{"names differing in case", rule("app", "Listen") + rule("App", "Send"), `rule "App" given twice`},
		{"too many", many, "13 rules, at most 12"},
		{"another type", strings.Replace(rule("a", "Listen"), sasRuleType, "AllowRule", 1), "only SharedAccessAuthorizationRule"},
		{"another claim type", strings.Replace(rule("a", "Listen"), "SharedAccessKey<", "NameIdentifier<", 1), "ClaimType"},
		{"unknown element", strings.Replace(rule("a", "Listen"), "<KeyName>", "<IssuerName>x</IssuerName><KeyName>", 1), "IssuerName"},
		{"not a rule", `<AllowRule><KeyName>a</KeyName></AllowRule>`, "not an <AuthorizationRule>"},
		{"a key too long", strings.Replace(rule("a", "Listen"), "</KeyName>", "</KeyName><PrimaryKey>"+strings.Repeat(secret, 6)+"</PrimaryKey>", 1), "longer than 256"},
		{"an element twice", strings.Replace(rule("a", "Listen"), "</KeyName>", "</KeyName><PrimaryKey>"+secret+"</PrimaryKey><PrimaryKey>"+secret+"</PrimaryKey>", 1), "<PrimaryKey> given twice"},
	} {
		_, err := decodeQueueRules(t, "<AuthorizationRules>"+tc.rules+"</AuthorizationRules>")
		if !errors.Is(err, ErrBadProperty) || !strings.Contains(err.Error(), "AuthorizationRules: ") || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v; want 400 naming %q", tc.name, err, tc.reason)
			continue
		}
		if strings.Contains(err.Error(), secret[:20]) {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}

	_, fields, err := DecodeEntry([]byte(subscriptionEntry("<AuthorizationRules>" + rule("a", "Listen") + "</AuthorizationRules>")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeSubscription(fields); !errors.Is(err, ErrBadProperty) || !strings.Contains(err.Error(), "topic's authorization rules") {
		t.Errorf("a subscription's own rules: %v, want 400", err)
	}
}

// TestPlanAuthorizationRules: a new rule gets Azure-shaped keys where the
// request gives none; a rule kept by name keeps the keys the request
// leaves out, and a key of another form it already had; new keys and
// names must have Service Bus's form; an unchanged rule is not put
// again; a rule the request leaves out is deleted.
func TestPlanAuthorizationRules(t *testing.T) {
	listen, send := uint32(sas.Listen), uint32(sas.Send)
	have := []*placementpb.AuthorizationRule{
		{Name: "kept", Entity: "q", Rights: listen, PrimaryKey: keyA, SecondaryKey: keyB},
		{Name: "cli-made", Entity: "q", Rights: listen, PrimaryKey: "short-cli-key"}, // the CLI takes any key
		{Name: "dropped", Entity: "q", Rights: send, PrimaryKey: keyA},
		{Name: "Renamed", Entity: "q", Rights: send, PrimaryKey: keyA, SecondaryKey: keyB},
	}
	want := []*placementpb.AuthorizationRule{
		{Name: "kept", Rights: listen},                                         // unchanged: keys left out
		{Name: "cli-made", Rights: listen | send, PrimaryKey: "short-cli-key"}, // sent back with its own key
		{Name: "renamed", Rights: send, PrimaryKey: keyB, SecondaryKey: keyA},  // case and keys swapped
		{Name: "new", Rights: listen},
	}
	plan, err := planAuthorizationRules("q", want, have)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.remove, []string{"dropped"}) {
		t.Errorf("remove %v, want [dropped]", plan.remove)
	}
	byName := map[string]*placementpb.AuthorizationRule{}
	for _, r := range plan.put {
		byName[r.Name] = r
		if r.Entity != "q" {
			t.Errorf("%s put on %q", r.Name, r.Entity)
		}
	}
	if len(plan.put) != 3 || byName["kept"] != nil {
		t.Fatalf("put %v, want cli-made, renamed and new", plan.put)
	}
	if r := byName["cli-made"]; r.PrimaryKey != "short-cli-key" || r.SecondaryKey != "" || r.Rights != listen|send {
		t.Errorf("cli-made = %v", r)
	}
	if r := byName["renamed"]; r.PrimaryKey != keyB || r.SecondaryKey != keyA {
		t.Errorf("renamed = %v", r)
	}
	if r := byName["new"]; !sas.IsAzureKey(r.PrimaryKey) || !sas.IsAzureKey(r.SecondaryKey) || r.PrimaryKey == r.SecondaryKey {
		t.Errorf("new rule's keys are not 44 characters of base64 each: %d, %d", len(r.PrimaryKey), len(r.SecondaryKey))
	}

	for _, tc := range []struct {
		name   string
		want   *placementpb.AuthorizationRule
		reason string
	}{
		{"a new short key", &placementpb.AuthorizationRule{Name: "n", Rights: listen, PrimaryKey: "short-key"}, "PrimaryKey must be 44 characters of base64"},
		{"a new key not base64", &placementpb.AuthorizationRule{Name: "n", Rights: listen, SecondaryKey: strings.Repeat("!", 44)}, "SecondaryKey must be 44"},
		{"a new name with a space", &placementpb.AuthorizationRule{Name: "a b", Rights: listen}, `rule "a b": a name of letters`},
		{"another key on a kept rule", &placementpb.AuthorizationRule{Name: "cli-made", Rights: listen, PrimaryKey: "other-short"}, "PrimaryKey must be 44"},
	} {
		_, err := planAuthorizationRules("q", []*placementpb.AuthorizationRule{tc.want}, have)
		if !errors.Is(err, ErrBadProperty) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v; want 400 naming %q", tc.name, err, tc.reason)
		}
		if err != nil && (strings.Contains(err.Error(), "short-key") || strings.Contains(err.Error(), "other-short")) {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
}

// ruleCatalog keeps entities and their authorization rules as the
// catalog does, for the handlers' whole flow; failPuts makes rule puts
// fail as a meta group without a leader does.
type ruleCatalog struct {
	placementpb.PlacementServiceClient
	mu       sync.Mutex
	entities map[string]*placementpb.Entity
	rules    map[string]*placementpb.AuthorizationRule // by entity/name, lower case
	failPuts bool
	changes  []string // rule puts and deletes, in order
	now      int64
}

func newRuleCatalog() *ruleCatalog {
	return &ruleCatalog{entities: map[string]*placementpb.Entity{}, rules: map[string]*placementpb.AuthorizationRule{}, now: 1_700_000_000_000}
}

func (c *ruleCatalog) CreateEntity(_ context.Context, in *placementpb.CreateEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := strings.ToLower(in.GetName())
	if c.entities[k] != nil {
		return nil, status.Error(codes.AlreadyExists, "exists")
	}
	c.now++
	e := &placementpb.Entity{Name: in.GetName(), Kind: in.GetKind(), Properties: withDefaults(in.GetProperties()), CreatedAtMs: c.now, UpdatedAtMs: c.now}
	c.entities[k] = e
	return e, nil
}

// withDefaults fills in what the catalog does for properties left out,
// so that a description of the entity reads back.
func withDefaults(p *placementpb.QueueProperties) *placementpb.QueueProperties {
	p = proto.Clone(p).(*placementpb.QueueProperties)
	for _, f := range []struct {
		v   *int64
		def int64
	}{{&p.LockDurationMs, 60_000}, {&p.MaxSizeInMegabytes, 1024}, {&p.DuplicateDetectionWindowMs, 600_000}, {&p.MaxMessageSizeInKilobytes, 256}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if p.MaxDeliveryCount == 0 {
		p.MaxDeliveryCount = 10
	}
	return p
}

func (c *ruleCatalog) GetEntity(_ context.Context, in *placementpb.GetEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entities[strings.ToLower(in.GetName())]; e != nil {
		return e, nil
	}
	return nil, status.Error(codes.NotFound, "no entity")
}

func (c *ruleCatalog) UpdateEntity(_ context.Context, in *placementpb.UpdateEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entities[strings.ToLower(in.GetName())]
	if e == nil {
		return nil, status.Error(codes.NotFound, "no entity")
	}
	c.now++
	e.Properties, e.UpdatedAtMs = withDefaults(in.GetProperties()), c.now
	return e, nil
}

func (c *ruleCatalog) DeleteEntity(_ context.Context, in *placementpb.DeleteEntityRequest, _ ...grpc.CallOption) (*placementpb.DeleteEntityResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := strings.ToLower(in.GetName())
	if c.entities[k] == nil {
		return nil, status.Error(codes.NotFound, "no entity")
	}
	delete(c.entities, k)
	for rk := range c.rules {
		if strings.HasPrefix(rk, k+"/") {
			delete(c.rules, rk)
		}
	}
	return &placementpb.DeleteEntityResponse{}, nil
}

func (c *ruleCatalog) ListEntities(_ context.Context, in *placementpb.ListEntitiesRequest, _ ...grpc.CallOption) (*placementpb.ListEntitiesResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*placementpb.Entity
	for _, e := range c.entities {
		if e.GetKind() == in.GetKind() {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *placementpb.Entity) int { return strings.Compare(a.GetName(), b.GetName()) })
	return &placementpb.ListEntitiesResponse{Entities: out}, nil
}

func (c *ruleCatalog) PutAuthorizationRule(_ context.Context, in *placementpb.PutAuthorizationRuleRequest, _ ...grpc.CallOption) (*placementpb.AuthorizationRule, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failPuts {
		return nil, status.Error(codes.Unavailable, "no meta leader known")
	}
	r := proto.Clone(in.GetRule()).(*placementpb.AuthorizationRule)
	k := strings.ToLower(r.GetEntity() + "/" + r.GetName())
	c.now++
	r.CreatedAtMs, r.UpdatedAtMs = c.now, c.now
	if old := c.rules[k]; old != nil {
		r.CreatedAtMs = old.CreatedAtMs
	}
	c.rules[k] = r
	c.changes = append(c.changes, "put "+r.GetName())
	return proto.Clone(r).(*placementpb.AuthorizationRule), nil
}

func (c *ruleCatalog) DeleteAuthorizationRule(_ context.Context, in *placementpb.DeleteAuthorizationRuleRequest, _ ...grpc.CallOption) (*placementpb.DeleteAuthorizationRuleResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := strings.ToLower(in.GetEntity() + "/" + in.GetName())
	if c.rules[k] == nil {
		return nil, status.Error(codes.NotFound, "no rule")
	}
	delete(c.rules, k)
	c.changes = append(c.changes, "delete "+in.GetName())
	return &placementpb.DeleteAuthorizationRuleResponse{}, nil
}

func (c *ruleCatalog) ListAuthorizationRules(_ context.Context, in *placementpb.ListAuthorizationRulesRequest, _ ...grpc.CallOption) (*placementpb.ListAuthorizationRulesResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*placementpb.AuthorizationRule
	for _, r := range c.rules {
		if in.GetAllScopes() || strings.EqualFold(r.GetEntity(), in.GetEntity()) {
			out = append(out, proto.Clone(r).(*placementpb.AuthorizationRule))
		}
	}
	slices.SortFunc(out, func(a, b *placementpb.AuthorizationRule) int {
		return strings.Compare(strings.ToLower(a.GetEntity()+"/"+a.GetName()), strings.ToLower(b.GetEntity()+"/"+b.GetName()))
	})
	return &placementpb.ListAuthorizationRulesResponse{Rules: out}, nil
}

// ruleGateway serves the admin API over a ruleCatalog, logging at debug
// level into the returned buffer.
func ruleGateway(t *testing.T) (*Gateway, *ruleCatalog, *bytes.Buffer, func(method, path, body string, ifMatch bool) *httptest.ResponseRecorder) {
	t.Helper()
	cat := newRuleCatalog()
	var logs bytes.Buffer
	var mu sync.Mutex
	g, err := New(Config{Catalog: cat, Stats: zeroStats{}, Validator: RulesValidator{Rules: devRules{}},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	const host = "localhost:5300"
	token := sign("https://"+host+"/", sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour))
	do := func(method, path, body string, ifMatch bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "https://"+host+path+"?api-version=2021-05", strings.NewReader(body))
		r.Header.Set("Authorization", token)
		if ifMatch {
			r.Header.Set("If-Match", "*")
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	return g, cat, &logs, do
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// answeredRules reads the rules of an answered description as the Go
// client does (by local names).
func answeredRules(t *testing.T, body string) []goSDKRule {
	t.Helper()
	var doc struct {
		Rules []goSDKRule `xml:"content>QueueDescription>AuthorizationRules>AuthorizationRule"`
		Topic []goSDKRule `xml:"content>TopicDescription>AuthorizationRules>AuthorizationRule"`
	}
	if err := xml.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return append(doc.Rules, doc.Topic...)
}

// TestAuthorizationRulesThroughHandlers: a queue created with rules
// answers them with generated keys, GET and the list answer the same,
// an update replaces them (the old rule deleted before the new put), an
// update without the element keeps them, and the console's edit leaves
// them alone; none of it logs a key.
func TestAuthorizationRulesThroughHandlers(t *testing.T) {
	g, cat, logs, do := ruleGateway(t)
	w := do("PUT", "/orders", queueEntry("<AuthorizationRules>"+rule("reader", "Listen")+"</AuthorizationRules>"), false)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	created := answeredRules(t, w.Body.String())
	if len(created) != 1 || *created[0].KeyName != "reader" || !slices.Equal(created[0].Rights, []string{"Listen"}) ||
		!sas.IsAzureKey(*created[0].PrimaryKey) || !sas.IsAzureKey(*created[0].SecondaryKey) || created[0].CreatedTime == nil {
		t.Fatalf("created rules %+v", created)
	}
	key := *created[0].PrimaryKey
	if r := cat.rules["orders/reader"]; r == nil || r.PrimaryKey != key || r.Entity != "orders" {
		t.Fatalf("the catalog holds %v", cat.rules)
	}
	getBody := do("GET", "/orders", "", false).Body.String()
	got := answeredRules(t, getBody)
	if len(got) != 1 || *got[0].PrimaryKey != key {
		t.Fatalf("GET answered %+v", got)
	}
	// What GET answered, sent back as an update, changes no rule.
	if w := do("PUT", "/orders", getBody, true); w.Code != http.StatusOK || !slices.Equal(cat.changes, []string{"put reader"}) {
		t.Fatalf("GET's answer sent back: %d %s; changes %v", w.Code, w.Body, cat.changes)
	}
	list := do("GET", "/$Resources/Queues", "", false).Body.String()
	if !strings.Contains(list, "<KeyName>reader</KeyName><PrimaryKey>"+key) {
		t.Fatalf("the list lacks the rule: %s", list)
	}

	w = do("PUT", "/orders", queueEntry("<AuthorizationRules>"+rule("writer", "Send")+"</AuthorizationRules>"), true)
	if w.Code != http.StatusOK {
		t.Fatalf("update: %d %s", w.Code, w.Body)
	}
	if got := answeredRules(t, w.Body.String()); len(got) != 1 || *got[0].KeyName != "writer" {
		t.Fatalf("update answered %+v", got)
	}
	if !slices.Equal(cat.changes, []string{"put reader", "delete reader", "put writer"}) {
		t.Fatalf("catalog changes %v", cat.changes)
	}
	if w := do("PUT", "/orders", queueEntry("<MaxDeliveryCount>4</MaxDeliveryCount>"), true); w.Code != http.StatusOK || len(answeredRules(t, w.Body.String())) != 1 {
		t.Fatalf("an update without the element: %d %s", w.Code, w.Body)
	}
	e, _ := cat.GetEntity(context.Background(), &placementpb.GetEntityRequest{Name: "orders"})
	if _, err := g.consoleUpdate(context.Background(), consoleAction{Name: "orders", Properties: map[string]string{"LockDuration": "PT10S"}}); err != nil {
		t.Fatal(err)
	}
	if len(cat.rules) != 1 || len(cat.changes) != 3 || e.GetProperties().GetLockDurationMs() != 10_000 {
		t.Fatalf("after the console's edit: rules %v, changes %v", cat.rules, cat.changes)
	}
	if _, err := g.consoleUpdate(context.Background(), consoleAction{Name: "orders", Properties: map[string]string{"AuthorizationRules": ""}}); !errors.Is(err, ErrBadProperty) {
		t.Fatalf("the console's edit of the rules: %v, want refused", err)
	}

	w = do("PUT", "/orders", queueEntry("<AuthorizationRules>"+rule("m", "Manage")+"</AuthorizationRules>"), true)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "Manage requires Listen and Send") || len(cat.rules) != 1 {
		t.Fatalf("an invalid update: %d %s; rules %v", w.Code, w.Body, cat.rules)
	}
	if w := do("PUT", "/events", topicEntry("<AuthorizationRules>"+rule("pub", "Send")+"</AuthorizationRules>"), false); w.Code != http.StatusCreated || len(answeredRules(t, w.Body.String())) != 1 {
		t.Fatalf("a topic with a rule: %d %s", w.Code, w.Body)
	}
	if got := answeredRules(t, do("GET", "/events", "", false).Body.String()); len(got) != 1 || *got[0].KeyName != "pub" {
		t.Fatalf("GET of the topic answered %+v", got)
	}

	// A put that fails after the create: the queue goes again, so that
	// the client's retry creates it whole.
	cat.failPuts = true
	w = do("PUT", "/half", queueEntry("<AuthorizationRules>"+rule("reader", "Listen")+"</AuthorizationRules>"), false)
	if w.Code != http.StatusServiceUnavailable || cat.entities["half"] != nil {
		t.Fatalf("a failed rule put: %d %s; entity %v", w.Code, w.Body, cat.entities["half"])
	}
	cat.failPuts = false

	for _, r := range cat.rules {
		for _, k := range []string{r.PrimaryKey, r.SecondaryKey} {
			if strings.Contains(logs.String(), k) {
				t.Fatalf("a key was logged: %s", logs)
			}
		}
	}
	if strings.Contains(logs.String(), key) {
		t.Fatalf("a deleted rule's key was logged: %s", logs)
	}
}
