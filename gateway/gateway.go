// Package gateway serves the Service Bus management API over HTTP: the
// ATOM documents that the Azure admin clients (Go azservicebus/admin,
// JavaScript and .NET ServiceBusAdministrationClient) send and read. It
// is stateless: entities live in the catalog, reached through
// PlacementService, and runtime counts come from the partition groups'
// counters. docs/gateway.md describes the API and its answers.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Stats reads entity partitions' counters from their groups' leaders
// (frontend/routing.Router follows leaders for it): one entity
// partition's, or many of one group's at once (all it holds when refs is
// empty; those it does not hold are left out).
type Stats interface {
	Stats(ctx context.Context, e *placementpb.Entity, partition uint32) (*partitionpb.StatsResponse, error)
	GroupStats(ctx context.Context, group uint64, refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error)
}

// Config configures a Gateway.
type Config struct {
	// Catalog is a PlacementService client: any member answers, and
	// forwards changes to the meta leader.
	Catalog placementpb.PlacementServiceClient
	Stats   Stats
	// Validator checks SAS tokens; every request needs one with the
	// Manage right. Required: there is no unauthenticated mode.
	Validator Validator
	// Namespace is the name $namespaceinfo reports. Default "quorumbus".
	Namespace string
	// Started is reported as the namespace's creation time (the catalog
	// does not record one). Default: when New ran.
	Started time.Time
	// StatsTimeout bounds reading an entity's counters. Default 5 s.
	StatsTimeout time.Duration
	// RequestTimeout bounds one request's calls to the cluster; the HTTP
	// listener must allow longer (adminhttp does, with an API). Default
	// 60 s.
	RequestTimeout time.Duration
	// Messages peeks, purges and re-drives messages for the console;
	// nil: those console calls answer 501.
	Messages Messages
	// Topology gives the console the nodes and groups; nil: none shown.
	Topology Topology
	Logger   *slog.Logger
	// Now is the clock tokens expire by. Default time.Now.
	Now func() time.Time
	// Credits are the namespace's credits the admin API spends, 10 a
	// request (throttle.go); nil: no throttling.
	Credits *credits.Bucket
}

// Validate reports a missing required part.
func (c Config) Validate() error {
	switch {
	case c.Catalog == nil:
		return errors.New("gateway: no catalog")
	case c.Stats == nil:
		return errors.New("gateway: no stats reader")
	case c.Validator == nil:
		return errors.New("gateway: no SAS validator")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "quorumbus"
	}
	if c.Started.IsZero() {
		c.Started = time.Now()
	}
	if c.StatsTimeout <= 0 {
		c.StatsTimeout = 5 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Gateway is an http.Handler for the management API.
type Gateway struct {
	cfg Config
	log *slog.Logger
}

var _ http.Handler = (*Gateway)(nil)

// New returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Gateway{cfg: cfg, log: cfg.Logger}, nil
}

// ErrNotImplemented: what the API does not serve yet; answered 501.
var ErrNotImplemented = errors.New("gateway: not implemented")

// request is one call, with what every answer needs.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	base string // scheme://host, as the client addressed us
	// apiVersion is the request's api-version, read once: a list links
	// every entry.
	apiVersion string
}

func newRequest(w http.ResponseWriter, r *http.Request) request {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return request{w: w, r: r, base: scheme + "://" + r.Host, apiVersion: r.URL.Query().Get("api-version")}
}

// selfLink is the URL of path as the client addressed it, with the API
// version it asked for.
func (q request) selfLink(path string) string {
	u := q.base + "/" + strings.TrimPrefix(path, "/")
	if q.apiVersion != "" {
		u += "?api-version=" + q.apiVersion
	}
	return u
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.RequestTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	q := newRequest(w, r)
	if r.URL.Path == consolePrefix || strings.HasPrefix(r.URL.Path, consolePrefix+"/") {
		g.serveConsole(w, r) // its own sign-in (console.go)
		return
	}
	if err := g.authorize(r); err != nil {
		g.log.Debug("admin request refused", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if !g.admit(q) {
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	segs := strings.Split(path, "/")
	switch {
	case path == "":
		writeError(w, http.StatusNotFound, "gateway: no entity named")
	case strings.EqualFold(path, "$namespaceinfo"):
		if !allow(q, http.MethodGet) {
			return
		}
		g.namespaceInfo(q)
	case strings.EqualFold(path, "$Resources/Queues"):
		if !allow(q, http.MethodGet) {
			return
		}
		g.listQueues(q)
	case strings.EqualFold(path, "$Resources/Topics"):
		if !allow(q, http.MethodGet) {
			return
		}
		g.listTopics(q)
	case len(segs) >= 2 && strings.EqualFold(segs[1], "Subscriptions"):
		g.serveSubscriptions(q, segs)
	case strings.HasPrefix(path, "$"):
		writeError(w, http.StatusNotFound, fmt.Sprintf("gateway: no resource %q", path))
	default:
		switch r.Method {
		case http.MethodGet:
			g.getEntity(q, path)
		case http.MethodPut:
			g.putEntity(q, path)
		case http.MethodDelete:
			g.deleteEntity(q, path)
		default:
			allow(q, http.MethodGet, http.MethodPut, http.MethodDelete)
		}
	}
}

// allow answers 405 unless the request's method is one of methods.
func allow(q request, methods ...string) bool {
	for _, m := range methods {
		if q.r.Method == m {
			return true
		}
	}
	q.w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(q.w, http.StatusMethodNotAllowed, fmt.Sprintf("gateway: %s is not allowed here", q.r.Method))
	return false
}

// authorize checks the SAS token: valid, covering the request's URL, and
// with the Manage right (every management operation needs it, reads too).
func (g *Gateway) authorize(r *http.Request) error {
	return g.authorizeToken(r.Header.Get("Authorization"), r.Host, r.URL.Path)
}

// authorizeToken checks a token (an Authorization header's value) for a
// request to host and path.
func (g *Gateway) authorizeToken(header, host, path string) error {
	t, err := ParseToken(header)
	if err != nil {
		return err
	}
	rights, err := g.cfg.Validator.Validate(t, g.cfg.Now())
	if err != nil {
		return err
	}
	if !t.Covers(host, path) {
		return fmt.Errorf("%w: token for %q, request for %s%s", ErrAudience, t.Resource, host, path)
	}
	if rights&RightManage == 0 {
		return ErrNoManage
	}
	return nil
}

// The headers in which the admin clients send a token for the target of
// a forwarding entity, as Service Bus names them.
const (
	forwardAuthHeader    = "ServiceBusSupplementaryAuthorization"
	dlqForwardAuthHeader = "ServiceBusDlqSupplementaryAuthorization"
)

// authorizeForwards checks, as Service Bus does, that a description that
// forwards (to forwardTo, or its dead letters to dlqTo; "" for none)
// comes with a token in the supplementary authorization header that
// grants Send on the target: the Manage right on the entity is not the
// right to send into another. An update checks it again, as the clients
// send the header with every PUT that carries the property.
func (g *Gateway) authorizeForwards(r *http.Request, forwardTo, dlqTo string) error {
	for _, f := range []struct{ property, target, header string }{
		{"ForwardTo", forwardTo, forwardAuthHeader},
		{"ForwardDeadLetteredMessagesTo", dlqTo, dlqForwardAuthHeader},
	} {
		if f.target == "" {
			continue
		}
		header := r.Header.Get(f.header)
		if header == "" {
			return fmt.Errorf("%w: %s %q: no %s header", ErrForwardAuth, f.property, f.target, f.header)
		}
		if err := g.authorizeTarget(header, r.Host, f.target); err != nil {
			return fmt.Errorf("%w: %s %q: %s: %w", ErrForwardAuth, f.property, f.target, f.header, err)
		}
	}
	return nil
}

// authorizeTarget checks a supplementary authorization token for the
// Send right on the entity path target.
func (g *Gateway) authorizeTarget(header, host, target string) error {
	t, err := ParseToken(header)
	if err != nil {
		return err
	}
	var rights Rights
	if v, ok := g.cfg.Validator.(TargetValidator); ok {
		rights, err = v.ValidateTarget(t, host, target, g.cfg.Now())
	} else if rights, err = g.cfg.Validator.Validate(t, g.cfg.Now()); err == nil && !t.Covers(host, target) {
		err = fmt.Errorf("%w: token for %q, target %s/%s", ErrAudience, t.Resource, host, target)
	}
	if err != nil {
		return err
	}
	if rights&RightSend == 0 {
		return errors.New("gateway: the token's rule has no Send right")
	}
	return nil
}

func (g *Gateway) namespaceInfo(q request) {
	started := atomTime(g.cfg.Started)
	writeEntry(q.w, http.StatusOK, entryOut{
		NS:      atomNS,
		ID:      q.selfLink("$namespaceinfo"),
		Title:   titleOut{Type: "text", Text: g.cfg.Namespace},
		Updated: atomTime(g.cfg.Now()),
		Author:  &authorOut{Name: g.cfg.Namespace},
		Link:    &linkOut{Rel: "self", Href: q.selfLink("$namespaceinfo")},
		Content: contentOut{Type: "application/xml", Body: namespaceInfoOut{
			NS: sbNS, NSI: xsiNS,
			CreatedTime: started, ModifiedTime: started,
			MessagingSKU: "Standard", Name: g.cfg.Namespace, NamespaceType: "Messaging",
		}},
	})
}

// entry wraps a description in an ATOM entry.
func (g *Gateway) entry(q request, e *placementpb.Entity, body atomBody) entryOut {
	self := q.selfLink(e.GetName())
	return entryOut{
		NS:        atomNS,
		ID:        self,
		Title:     titleOut{Type: "text", Text: e.GetName()},
		Published: atomTime(msTime(e.GetCreatedAtMs())),
		Updated:   atomTime(msTime(e.GetUpdatedAtMs())),
		Author:    &authorOut{Name: g.cfg.Namespace},
		Link:      &linkOut{Rel: "self", Href: self},
		Content:   contentOut{Type: "application/xml", Body: body},
	}
}

func (g *Gateway) getEntity(q request, name string) {
	ctx := q.r.Context()
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		g.fail(q, err)
		return
	}
	switch e.GetKind() {
	case placementpb.EntityKind_ENTITY_KIND_QUEUE:
	case placementpb.EntityKind_ENTITY_KIND_TOPIC:
		g.getTopic(q, e)
		return
	default:
		g.fail(q, fmt.Errorf("%w: %s is a %s", ErrNotFound, name, e.GetKind()))
		return
	}
	rulesOf := async(func() ([]*placementpb.AuthorizationRule, error) { return g.entityRules(ctx, e.GetName()) })
	counts := g.counts(ctx, e)
	// Without its rules the description must not go out: a client that
	// sends it back in an update would delete them.
	rules, err := rulesOf()
	if err != nil {
		g.fail(q, err)
		return
	}
	writeEntry(q.w, http.StatusOK, g.entry(q, e, describeQueue(e, counts, rules)))
}

func (g *Gateway) readBody(q request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(q.w, http.StatusRequestEntityTooLarge, fmt.Sprintf("gateway: request body over %d bytes", maxBody))
		} else {
			writeError(q.w, http.StatusBadRequest, "gateway: reading the request body: "+err.Error())
		}
		return nil, false
	}
	return body, true
}

// putEntity creates an entity (no If-Match) or updates it (If-Match: *),
// by the description the body carries.
func (g *Gateway) putEntity(q request, name string) {
	body, ok := g.readBody(q)
	if !ok {
		return
	}
	kind, fields, err := DecodeEntry(body)
	if err != nil {
		g.fail(q, err)
		return
	}
	switch kind {
	case "QueueDescription":
	case "TopicDescription":
		g.putTopic(q, name, fields)
		return
	case "SubscriptionDescription", "RuleDescription":
		g.fail(q, fmt.Errorf("%w: a <%s> belongs under /<topic>/Subscriptions", ErrBadXML, kind))
		return
	default:
		g.fail(q, fmt.Errorf("%w: unknown description <%s>", ErrBadXML, kind))
		return
	}
	req, err := DecodeQueue(fields)
	if err == nil {
		err = g.authorizeForwards(q.r, req.desc.ForwardTo, req.desc.ForwardDeadLetteredMessagesTo)
	}
	if err != nil {
		g.fail(q, err)
		return
	}
	if q.r.Header.Get("If-Match") == "" {
		g.createQueue(q, name, req)
		return
	}
	g.updateQueue(q, name, req)
}

func (g *Gateway) createQueue(q request, name string, req queueRequest) {
	ctx := q.r.Context()
	rules, err := g.planRules(ctx, name, req.rules, true)
	if err != nil {
		g.fail(q, err)
		return
	}
	e, err := g.cfg.Catalog.CreateEntity(ctx, &placementpb.CreateEntityRequest{
		Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE, Properties: req.desc.Properties(), Status: req.status,
	})
	if err != nil {
		g.fail(q, err)
		return
	}
	put, err := g.applyAuthorizationRules(ctx, e.GetName(), rules)
	if err != nil {
		g.undoCreate(ctx, e.GetName(), err)
		g.fail(q, err)
		return
	}
	// A queue just created holds nothing: its counts are zero without
	// asking its partitions, which may still be configuring.
	writeEntry(q.w, http.StatusCreated, g.entry(q, e, describeQueue(e, &Counts{}, put)))
}

// immutable are the properties fixed at creation: an update may repeat
// them, not change them.
var immutable = []struct {
	name string
	get  func(placementpb.QueueDescription) bool
}{
	{"RequiresSession", func(d placementpb.QueueDescription) bool { return d.RequiresSession }},
	{"RequiresDuplicateDetection", func(d placementpb.QueueDescription) bool { return d.RequiresDuplicateDetection }},
	{"EnablePartitioning", func(d placementpb.QueueDescription) bool { return d.EnablePartitioning }},
}

// updateQueue replaces a queue's description, as a PUT does: properties
// the request leaves out go back to their defaults, except the ones fixed
// at creation, which keep their value.
func (g *Gateway) updateQueue(q request, name string, req queueRequest) {
	ctx := q.r.Context()
	e, err := g.replaceQueue(ctx, name, req)
	if err != nil {
		g.fail(q, err)
		return
	}
	rules, err := g.entityRules(ctx, e.GetName())
	if err != nil {
		g.fail(q, err)
		return
	}
	writeEntry(q.w, http.StatusOK, g.entry(q, e, describeQueue(e, nil, rules)))
}

// replaceQueue is updateQueue's work, shared with the console's edit:
// the properties, then the authorization rules when the description
// gives them. Everything is checked before anything changes.
func (g *Gateway) replaceQueue(ctx context.Context, name string, req queueRequest) (*placementpb.Entity, error) {
	cur, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		return nil, err
	}
	if cur.GetKind() != placementpb.EntityKind_ENTITY_KIND_QUEUE {
		return nil, fmt.Errorf("%w: %s is a %s, not a queue", ErrBadProperty, name, cur.GetKind())
	}
	was := placementpb.Describe(cur.GetProperties())
	for _, p := range immutable {
		if req.set[p.name] && p.get(req.desc) != p.get(was) {
			return nil, fmt.Errorf("%w: %s: fixed at creation (%t), cannot be changed", ErrBadProperty, p.name, p.get(was))
		}
	}
	req.desc.RequiresSession = was.RequiresSession
	req.desc.RequiresDuplicateDetection = was.RequiresDuplicateDetection
	req.desc.EnablePartitioning, req.desc.PartitionCount = was.EnablePartitioning, was.PartitionCount
	rules, err := g.planRules(ctx, cur.GetName(), req.rules, false)
	if err != nil {
		return nil, err
	}
	e, err := g.cfg.Catalog.UpdateEntity(ctx, &placementpb.UpdateEntityRequest{Name: name, Properties: req.desc.Properties(), Status: req.status})
	if err != nil {
		return nil, err
	}
	if _, err := g.applyAuthorizationRules(ctx, e.GetName(), rules); err != nil {
		return nil, err
	}
	return e, nil
}

func (g *Gateway) deleteEntity(q request, name string) {
	ctx := q.r.Context()
	// The catalog deletes any kind by name; a topic's subscriptions go
	// with it (the catalog's work).
	if _, err := g.cfg.Catalog.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: name}); err != nil {
		g.fail(q, err)
		return
	}
	q.w.WriteHeader(http.StatusOK)
}

// defaultPage is the page size of a list that gives no $top (Service
// Bus's); maxPage bounds one (the namespace's entity limit).
const (
	defaultPage = 100
	maxPage     = 10_000
)

func (g *Gateway) listQueues(q request) {
	skip, top, err := paging(q.r)
	if err != nil {
		g.fail(q, err)
		return
	}
	ctx := q.r.Context()
	rulesOf := async(func() (map[string][]*placementpb.AuthorizationRule, error) { return g.rulesByEntity(ctx) })
	resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{
		// One more than the page, to tell whether a next page exists.
		Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE, Skip: uint32(skip), Top: uint32(top + 1),
	})
	if err != nil {
		g.fail(q, err)
		return
	}
	es, more := page(resp.GetEntities(), top)
	rules, err := rulesOf()
	if err != nil {
		g.fail(q, err)
		return
	}
	entries := make([]entryOut, len(es))
	g.forEachCounted(ctx, es, func(i int, c *Counts) {
		entries[i] = g.entry(q, es[i], describeQueue(es[i], c, rules[strings.ToLower(es[i].GetName())]))
	})
	g.writeFeed(q, "Queues", "$Resources/Queues", skip, top, more, entries)
}

// paging reads $skip and $top.
func paging(r *http.Request) (skip, top int, err error) {
	qs := r.URL.Query()
	top = defaultPage
	for _, p := range []struct {
		name string
		dst  *int
	}{{"$skip", &skip}, {"$top", &top}} {
		v := qs.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("%w: %s=%q is not a count", ErrBadProperty, p.name, v)
		}
		*p.dst = n
	}
	if top == 0 || top > maxPage {
		top = maxPage
	}
	return skip, top, nil
}

// fail answers an error with its status (errors.go) and its text.
func (g *Gateway) fail(q request, err error) {
	code := httpStatus(err)
	if code >= 500 && code != http.StatusNotImplemented {
		g.log.Warn("admin request failed", "method", q.r.Method, "path", q.r.URL.Path, "status", code, "err", err)
	}
	writeError(q.w, code, err.Error())
}
