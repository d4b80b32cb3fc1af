package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The requests on topics, subscriptions and rules. The catalog names a
// subscription <topic>/Subscriptions/<name>, as its path is on Service
// Bus, and keeps its rules in the subscription's entity.

// entryAt wraps a description in an ATOM entry for the resource at path
// (as the client addressed it), titled by its own name.
func (g *Gateway) entryAt(q request, path, title string, createdMs, updatedMs int64, body atomBody) entryOut {
	self := q.selfLink(path)
	return entryOut{
		NS:        atomNS,
		ID:        self,
		Title:     titleOut{Type: "text", Text: title},
		Published: atomTime(msTime(createdMs)),
		Updated:   atomTime(msTime(updatedMs)),
		Author:    &authorOut{Name: g.cfg.Namespace},
		Link:      &linkOut{Rel: "self", Href: self},
		Content:   contentOut{Type: "application/xml", Body: body},
	}
}

// topicFiguresOf reads what a topic's runtime properties add up: its own
// partitions' counters and its subscriptions with their rules.
func (g *Gateway) topicFiguresOf(ctx context.Context, e *placementpb.Entity) topicFigures {
	fig := topicFigures{counts: g.counts(ctx, e)}
	subs, err := g.subscriptionsOf(ctx, e.GetName())
	if err != nil {
		g.log.Warn("listing a topic's subscriptions", "topic", e.GetName(), "err", err)
		return fig
	}
	fig.addSubscriptions(subs)
	return fig
}

// addSubscriptions sets the figures a topic's subscriptions give: how
// many, and their filters by kind.
func (fig *topicFigures) addSubscriptions(subs []*placementpb.Entity) {
	fig.haveSubscriptions = true
	fig.subscriptions = len(subs)
	for _, s := range subs {
		for _, r := range s.GetRules() {
			switch r.GetFilter().(type) {
			case *placementpb.Rule_SqlFilter:
				fig.sql++
			case *placementpb.Rule_CorrelationFilter:
				fig.correlation++
			}
		}
	}
}

// subscriptionFigures sets the subscription figures of a page of topics
// from their subscriptions, asked of the catalog in one call naming the
// page's topics (ListEntities with topics), which reads each from its
// name index: a page costs its own topics' subscriptions, not every
// subscription of the namespace. A catalog member that predates topics
// answers every subscription; those of other topics are left out here.
// When the call fails, the page is answered without the figures.
func (g *Gateway) subscriptionFigures(ctx context.Context, topics []*placementpb.Entity, figs []topicFigures) {
	if len(topics) == 0 {
		return
	}
	names := make([]string, len(topics))
	byTopic := make(map[string]int, len(topics))
	for i, t := range topics {
		names[i] = t.GetName()
		byTopic[strings.ToLower(t.GetName())] = i
	}
	resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topics: names})
	if err != nil {
		g.log.Warn("listing the subscriptions of a page of topics", "topics", len(topics), "err", err)
		return
	}
	subs := make([][]*placementpb.Entity, len(topics))
	for _, s := range resp.GetEntities() {
		// <topic>/Subscriptions/<name>: a topic's name may hold '/', a
		// subscription's may not.
		cut := strings.LastIndex(s.GetName(), "/Subscriptions/")
		if cut < 0 {
			continue
		}
		if i, ok := byTopic[strings.ToLower(s.GetName()[:cut])]; ok {
			subs[i] = append(subs[i], s)
		}
	}
	for i := range topics {
		figs[i].addSubscriptions(subs[i])
	}
}

// subscriptionsOf lists a topic's subscriptions, ordered by name: the
// catalog reads the topic's range of its name index, not the namespace.
func (g *Gateway) subscriptionsOf(ctx context.Context, topic string) ([]*placementpb.Entity, error) {
	resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topic: topic})
	return resp.GetEntities(), err
}

func (g *Gateway) getTopic(q request, e *placementpb.Entity) {
	ctx := q.r.Context()
	rulesOf := async(func() ([]*placementpb.AuthorizationRule, error) { return g.entityRules(ctx, e.GetName()) })
	figures := g.topicFiguresOf(ctx, e)
	rules, err := rulesOf()
	if err != nil {
		g.fail(q, err) // see getEntity
		return
	}
	body := describeTopic(e, figures, rules)
	writeEntry(q.w, http.StatusOK, g.entryAt(q, e.GetName(), e.GetName(), e.GetCreatedAtMs(), e.GetUpdatedAtMs(), body))
}

func (g *Gateway) putTopic(q request, name string, fields []rawField) {
	req, err := DecodeTopic(fields)
	if err != nil {
		g.fail(q, err)
		return
	}
	ctx := q.r.Context()
	var e *placementpb.Entity
	if q.r.Header.Get("If-Match") == "" {
		plan, err := g.planRules(ctx, name, req.rules, true)
		if err != nil {
			g.fail(q, err)
			return
		}
		e, err = g.cfg.Catalog.CreateEntity(ctx, &placementpb.CreateEntityRequest{
			Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Properties: req.desc.Properties(), Status: req.status,
		})
		if err != nil {
			g.fail(q, err)
			return
		}
		rules, err := g.applyAuthorizationRules(ctx, e.GetName(), plan)
		if err != nil {
			g.undoCreate(ctx, e.GetName(), err)
			g.fail(q, err)
			return
		}
		body := describeTopic(e, topicFigures{counts: &Counts{}, haveSubscriptions: true}, rules)
		writeEntry(q.w, http.StatusCreated, g.entryAt(q, name, e.GetName(), e.GetCreatedAtMs(), e.GetUpdatedAtMs(), body))
		return
	}
	e, err = g.replaceTopic(ctx, name, req)
	if err != nil {
		g.fail(q, err)
		return
	}
	rules, err := g.entityRules(ctx, e.GetName())
	if err != nil {
		g.fail(q, err)
		return
	}
	writeEntry(q.w, http.StatusOK, g.entryAt(q, name, e.GetName(), e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeTopic(e, topicFigures{}, rules)))
}

// replaceTopic replaces a topic's description as a PUT with If-Match
// does (shared with the console's edit): what is fixed at creation may
// be repeated, not changed.
func (g *Gateway) replaceTopic(ctx context.Context, name string, req topicRequest) (*placementpb.Entity, error) {
	cur, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		return nil, err
	}
	if cur.GetKind() != placementpb.EntityKind_ENTITY_KIND_TOPIC {
		return nil, fmt.Errorf("%w: %s is a %s, not a topic", ErrBadProperty, name, cur.GetKind())
	}
	was := placementpb.TopicDescriptionOf(cur.GetProperties())
	wasPartitioned := was.EnablePartitioning || was.PartitionCount > 1
	switch {
	case req.set["RequiresDuplicateDetection"] && req.desc.RequiresDuplicateDetection != was.RequiresDuplicateDetection:
		return nil, fmt.Errorf("%w: RequiresDuplicateDetection: fixed at creation (%t), cannot be changed", ErrBadProperty, was.RequiresDuplicateDetection)
	case req.set["EnablePartitioning"] && req.desc.EnablePartitioning != wasPartitioned:
		return nil, fmt.Errorf("%w: EnablePartitioning: fixed at creation (%t), cannot be changed", ErrBadProperty, wasPartitioned)
	}
	req.desc.RequiresDuplicateDetection = was.RequiresDuplicateDetection
	req.desc.EnablePartitioning, req.desc.PartitionCount = was.EnablePartitioning, was.PartitionCount
	plan, err := g.planRules(ctx, cur.GetName(), req.rules, false)
	if err != nil {
		return nil, err
	}
	e, err := g.cfg.Catalog.UpdateEntity(ctx, &placementpb.UpdateEntityRequest{Name: name, Properties: req.desc.Properties(), Status: req.status})
	if err != nil {
		return nil, err
	}
	if _, err := g.applyAuthorizationRules(ctx, e.GetName(), plan); err != nil {
		return nil, err
	}
	return e, nil
}

func (g *Gateway) listTopics(q request) {
	skip, top, err := paging(q.r)
	if err != nil {
		g.fail(q, err)
		return
	}
	ctx := q.r.Context()
	rulesOf := async(func() (map[string][]*placementpb.AuthorizationRule, error) { return g.rulesByEntity(ctx) })
	resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{
		Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Skip: uint32(skip), Top: uint32(top + 1),
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
	figs := make([]topicFigures, len(es))
	g.subscriptionFigures(ctx, es, figs)
	g.forEachCounted(ctx, es, func(i int, c *Counts) { figs[i].counts = c })
	entries := make([]entryOut, len(es))
	for i, e := range es {
		entries[i] = g.entryAt(q, e.GetName(), e.GetName(), e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeTopic(e, figs[i], rules[strings.ToLower(e.GetName())]))
	}
	g.writeFeed(q, "Topics", "$Resources/Topics", skip, top, more, entries)
}

// page cuts a list read with one entity more than top to the page, and
// says whether more follow.
func page(es []*placementpb.Entity, top int) ([]*placementpb.Entity, bool) {
	if len(es) > top {
		return es[:top], true
	}
	return es, false
}

// inFeed makes entries those of a feed, which carry what the admin
// clients read and ATOM requires, and no more: they inherit the feed's
// namespace rather than declare it each, as Service Bus's feeds do, and
// its author (writeFeed gives the feed one); and they leave out their
// published time and their self link, which no client reads (Go and
// .NET name an entity by its title, JavaScript by its id; all three read
// the description in its content) and which ATOM does not require. The
// description inside is the one GET answers. A list of the namespace
// waits on the Go admin client's decoding, which costs per byte and per
// element (BenchmarkGoAdminListDecode).
func inFeed(entries []entryOut) []entryOut {
	for i := range entries {
		e := &entries[i]
		e.NS, e.Published, e.Author, e.Link = "", "", nil, nil
	}
	return entries
}

// writeFeed answers a page of a list, with a next link (by which the
// JavaScript client pages) when more follow.
func (g *Gateway) writeFeed(q request, title, path string, skip, top int, more bool, entries []entryOut) {
	feed := feedOut{
		NS:      atomNS,
		Title:   titleOut{Type: "text", Text: title},
		ID:      q.selfLink(path),
		Updated: atomTime(g.cfg.Now()),
		Author:  &authorOut{Name: g.cfg.Namespace},
		Links:   []linkOut{{Rel: "self", Href: q.selfLink(path)}},
		Entries: inFeed(entries),
	}
	if more {
		next := q.base + "/" + path + "?" + url.Values{
			"$skip": {strconv.Itoa(skip + len(entries))}, "$top": {strconv.Itoa(top)}, "api-version": {q.apiVersion},
		}.Encode()
		feed.Links = append(feed.Links, linkOut{Rel: "next", Href: next})
	}
	writeDoc(q.w, http.StatusOK, feedType, feed.writeAtom)
}

// serveSubscriptions serves /<topic>/Subscriptions[/<sub>[/Rules[/<rule>]]].
func (g *Gateway) serveSubscriptions(q request, segs []string) {
	topic := segs[0]
	switch {
	case len(segs) == 2:
		if allow(q, http.MethodGet) {
			g.listSubscriptions(q, topic)
		}
	case len(segs) == 3:
		name := subscriptionName(topic, segs[2])
		switch q.r.Method {
		case http.MethodGet:
			g.getSubscription(q, name, segs[2])
		case http.MethodPut:
			g.putSubscription(q, name, segs[2])
		case http.MethodDelete:
			g.deleteEntity(q, name)
		default:
			allow(q, http.MethodGet, http.MethodPut, http.MethodDelete)
		}
	case len(segs) == 4 && strings.EqualFold(segs[3], "Rules"):
		if allow(q, http.MethodGet) {
			g.listRules(q, subscriptionName(topic, segs[2]))
		}
	case len(segs) == 5 && strings.EqualFold(segs[3], "Rules"):
		sub := subscriptionName(topic, segs[2])
		switch q.r.Method {
		case http.MethodGet:
			g.getRule(q, sub, segs[4])
		case http.MethodPut:
			g.putRule(q, sub, segs[4])
		case http.MethodDelete:
			g.deleteRule(q, sub, segs[4])
		default:
			allow(q, http.MethodGet, http.MethodPut, http.MethodDelete)
		}
	default:
		writeError(q.w, http.StatusNotFound, fmt.Sprintf("gateway: no resource %q", strings.Join(segs, "/")))
	}
}

// subscription reads a subscription from the catalog; a name that is
// some other kind of entity is reported missing, as Service Bus would.
func (g *Gateway) subscription(ctx context.Context, name string) (*placementpb.Entity, error) {
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		return nil, err
	}
	if e.GetKind() != placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		return nil, fmt.Errorf("%w: %s is a %s, not a subscription", ErrNotFound, name, e.GetKind())
	}
	return e, nil
}

func (g *Gateway) getSubscription(q request, name, title string) {
	ctx := q.r.Context()
	e, err := g.subscription(ctx, name)
	if err != nil {
		g.fail(q, err)
		return
	}
	writeEntry(q.w, http.StatusOK, g.entryAt(q, name, title, e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeSubscription(e, g.counts(ctx, e))))
}

func (g *Gateway) putSubscription(q request, name, title string) {
	body, ok := g.readBody(q)
	if !ok {
		return
	}
	kind, fields, err := DecodeEntry(body)
	if err == nil && kind != "SubscriptionDescription" {
		err = fmt.Errorf("%w: a subscription's path takes a SubscriptionDescription, not <%s>", ErrBadXML, kind)
	}
	if err != nil {
		g.fail(q, err)
		return
	}
	req, err := DecodeSubscription(fields)
	if err == nil {
		err = g.authorizeForwards(q.r, req.desc.ForwardTo, req.desc.ForwardDeadLetteredMessagesTo)
	}
	if err != nil {
		g.fail(q, err)
		return
	}
	ctx := q.r.Context()
	if q.r.Header.Get("If-Match") == "" {
		e, err := g.cfg.Catalog.CreateEntity(ctx, &placementpb.CreateEntityRequest{
			Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			Properties: req.desc.Properties(), Status: req.status, Rules: req.rules,
		})
		if err != nil {
			g.fail(q, err)
			return
		}
		writeEntry(q.w, http.StatusCreated, g.entryAt(q, name, title, e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeSubscription(e, &Counts{})))
		return
	}
	e, err := g.replaceSubscription(ctx, name, req)
	if err != nil {
		g.fail(q, err)
		return
	}
	writeEntry(q.w, http.StatusOK, g.entryAt(q, name, title, e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeSubscription(e, nil)))
}

// replaceSubscription replaces a subscription's description as a PUT
// with If-Match does (shared with the console's edit).
func (g *Gateway) replaceSubscription(ctx context.Context, name string, req subscriptionRequest) (*placementpb.Entity, error) {
	if req.set["DefaultRuleDescription"] {
		return nil, fmt.Errorf("%w: DefaultRuleDescription: only when the subscription is created; change its rules through its Rules", ErrBadProperty)
	}
	cur, err := g.subscription(ctx, name)
	if err != nil {
		return nil, err
	}
	was := placementpb.SubscriptionDescriptionOf(cur.GetProperties())
	if req.set["RequiresSession"] && req.desc.RequiresSession != was.RequiresSession {
		return nil, fmt.Errorf("%w: RequiresSession: fixed at creation (%t), cannot be changed", ErrBadProperty, was.RequiresSession)
	}
	req.desc.RequiresSession = was.RequiresSession
	return g.cfg.Catalog.UpdateEntity(ctx, &placementpb.UpdateEntityRequest{Name: name, Properties: req.desc.Properties(), Status: req.status})
}

func (g *Gateway) listSubscriptions(q request, topic string) {
	skip, top, err := paging(q.r)
	if err != nil {
		g.fail(q, err)
		return
	}
	ctx := q.r.Context()
	t, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: topic})
	if err == nil && t.GetKind() != placementpb.EntityKind_ENTITY_KIND_TOPIC {
		err = fmt.Errorf("%w: %s is a %s, not a topic", ErrNotFound, topic, t.GetKind())
	}
	if err != nil {
		g.fail(q, err)
		return
	}
	resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{
		Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topic: t.GetName(), Skip: uint32(skip), Top: uint32(top + 1),
	})
	if err != nil {
		g.fail(q, err)
		return
	}
	es, more := page(resp.GetEntities(), top)
	counts := make([]*Counts, len(es))
	g.forEachCounted(ctx, es, func(i int, c *Counts) { counts[i] = c })
	entries := make([]entryOut, len(es))
	for i, e := range es {
		_, title, _ := strings.Cut(e.GetName()[len(t.GetName()):], "/Subscriptions/")
		entries[i] = g.entryAt(q, e.GetName(), title, e.GetCreatedAtMs(), e.GetUpdatedAtMs(), describeSubscription(e, counts[i]))
	}
	g.writeFeed(q, "Subscriptions", t.GetName()+"/Subscriptions", skip, top, more, entries)
}

// ruleOf finds a subscription's rule by name (ignoring case, as the
// catalog compares them).
func ruleOf(e *placementpb.Entity, name string) *placementpb.Rule {
	for _, r := range e.GetRules() {
		if strings.EqualFold(r.GetName(), name) {
			return r
		}
	}
	return nil
}

func (g *Gateway) getRule(q request, sub, name string) {
	e, err := g.subscription(q.r.Context(), sub)
	if err != nil {
		g.fail(q, err)
		return
	}
	r := ruleOf(e, name)
	if r == nil {
		g.fail(q, fmt.Errorf("%w: no rule %q on %s", ErrNotFound, name, sub))
		return
	}
	g.writeRule(q, http.StatusOK, sub, r)
}

func (g *Gateway) writeRule(q request, status int, sub string, r *placementpb.Rule) {
	path := sub + "/Rules/" + r.GetName()
	writeEntry(q.w, status, g.entryAt(q, path, r.GetName(), r.GetCreatedAtMs(), r.GetCreatedAtMs(), describeRule(r)))
}

// putRule adds a rule (no If-Match) or replaces one (If-Match: *). The
// catalog has no replace: an update removes the rule and adds the new
// one, and puts the old one back when the new one is refused. Between
// the two a message may meet the subscription without the rule.
func (g *Gateway) putRule(q request, sub, name string) {
	body, ok := g.readBody(q)
	if !ok {
		return
	}
	kind, fields, err := DecodeEntry(body)
	if err == nil && kind != "RuleDescription" {
		err = fmt.Errorf("%w: a rule's path takes a RuleDescription, not <%s>", ErrBadXML, kind)
	}
	if err != nil {
		g.fail(q, err)
		return
	}
	r, err := DecodeRule(fields)
	if err != nil {
		g.fail(q, err)
		return
	}
	if r.Name != "" && !strings.EqualFold(r.Name, name) {
		g.fail(q, fmt.Errorf("%w: Name: %q, but the path names rule %q", ErrBadProperty, r.Name, name))
		return
	}
	r.Name = name
	ctx := q.r.Context()
	if q.r.Header.Get("If-Match") == "" {
		added, err := g.cfg.Catalog.AddRule(ctx, &placementpb.AddRuleRequest{Subscription: sub, Rule: r})
		if err != nil {
			g.fail(q, err)
			return
		}
		g.writeRule(q, http.StatusCreated, sub, added)
		return
	}
	// One catalog command replaces the rule: the partitions get the new
	// rule set in one configuration, never without the rule or with both.
	replaced, err := g.cfg.Catalog.ReplaceRule(ctx, &placementpb.AddRuleRequest{Subscription: sub, Rule: r})
	if err != nil {
		g.fail(q, err)
		return
	}
	g.writeRule(q, http.StatusOK, sub, replaced)
}

func (g *Gateway) deleteRule(q request, sub, name string) {
	if _, err := g.cfg.Catalog.RemoveRule(q.r.Context(), &placementpb.RemoveRuleRequest{Subscription: sub, RuleName: name}); err != nil {
		g.fail(q, err)
		return
	}
	q.w.WriteHeader(http.StatusOK)
}

func (g *Gateway) listRules(q request, sub string) {
	skip, top, err := paging(q.r)
	if err != nil {
		g.fail(q, err)
		return
	}
	e, err := g.subscription(q.r.Context(), sub)
	if err != nil {
		g.fail(q, err)
		return
	}
	rules := e.GetRules()[min(skip, len(e.GetRules())):]
	more := len(rules) > top
	if more {
		rules = rules[:top]
	}
	entries := make([]entryOut, len(rules))
	for i, r := range rules {
		entries[i] = g.entryAt(q, sub+"/Rules/"+r.GetName(), r.GetName(), r.GetCreatedAtMs(), r.GetCreatedAtMs(), describeRule(r))
	}
	g.writeFeed(q, "Rules", sub+"/Rules", skip, top, more, entries)
}
