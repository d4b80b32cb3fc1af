package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The console's JSON endpoints (console.go routes them, signed in).

// entityJSON is an entity as the console lists it.
type entityJSON struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Status     string   `json:"status"`
	Degraded   bool     `json:"degraded"`
	Partitions int      `json:"partitions"`
	Groups     []uint64 `json:"groups"`
	// Counts are absent when a partition did not answer in time.
	Counts     *Counts        `json:"counts,omitempty"`
	Properties map[string]any `json:"properties,omitempty"`
}

func kindName(k placementpb.EntityKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "ENTITY_KIND_"))
}

func (g *Gateway) serveConsoleAPI(w http.ResponseWriter, r *http.Request, api string) {
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.RequestTimeout)
	defer cancel()
	var (
		out any
		err error
	)
	switch {
	case api == "namespace" && r.Method == http.MethodGet:
		out, err = g.consoleNamespace(ctx)
	case api == "entity" && r.Method == http.MethodGet:
		out, err = g.consoleEntity(ctx, r.URL.Query().Get("name"))
	case api == "messages" && r.Method == http.MethodGet:
		out, err = g.consoleMessages(ctx, r)
	case r.Method == http.MethodPost && slices.Contains([]string{"create", "update", "delete", "purge", "redrive"}, api):
		var in consoleAction
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil {
			writeJSONError(w, http.StatusBadRequest, "console: the request is not JSON: "+err.Error())
			return
		}
		out, err = g.consoleAct(ctx, api, in)
	default:
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("console: no %s %s", r.Method, api))
		return
	}
	if err != nil {
		code := httpStatus(err)
		if code >= 500 {
			g.log.Warn("console request failed", "api", api, "err", err)
		}
		writeJSONError(w, code, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// consoleNamespace lists every entity with its counts, and the nodes and
// groups of the routing table.
func (g *Gateway) consoleNamespace(ctx context.Context) (any, error) {
	var es []*placementpb.Entity
	for _, kind := range []placementpb.EntityKind{
		placementpb.EntityKind_ENTITY_KIND_QUEUE, placementpb.EntityKind_ENTITY_KIND_TOPIC, placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
	} {
		resp, err := g.cfg.Catalog.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: kind})
		if err != nil {
			return nil, err
		}
		es = append(es, resp.GetEntities()...)
	}
	slices.SortFunc(es, func(a, b *placementpb.Entity) int { return strings.Compare(a.GetName(), b.GetName()) })
	out := struct {
		Namespace string       `json:"namespace"`
		Entities  []entityJSON `json:"entities"`
		Nodes     []any        `json:"nodes"`
		Groups    []any        `json:"groups"`
	}{Namespace: g.cfg.Namespace, Entities: make([]entityJSON, len(es)), Nodes: []any{}, Groups: []any{}}
	g.forEachCounted(ctx, es, func(i int, c *Counts) { out.Entities[i] = entityOf(es[i], c) })
	if g.cfg.Topology != nil {
		if t := g.cfg.Topology.Table(); t != nil {
			for _, n := range t.GetNodes() {
				out.Nodes = append(out.Nodes, map[string]any{"id": n.GetId(), "addr": n.GetGrpcAddr(), "zone": n.GetZone(), "alive": n.GetAlive(), "draining": n.GetDraining()})
			}
			for _, gr := range t.GetGroups() {
				var replicas []string
				for _, rp := range gr.GetReplicas() {
					replicas = append(replicas, rp.GetNodeId())
				}
				out.Groups = append(out.Groups, map[string]any{"id": gr.GetId(), "leader": gr.GetLeaderId(), "healthy": gr.GetHasQuorum(), "replicas": replicas})
			}
		}
	}
	return out, nil
}

func entityOf(e *placementpb.Entity, c *Counts) entityJSON {
	return entityJSON{
		Name: e.GetName(), Kind: kindName(e.GetKind()), Status: statusName(e.GetStatus()), Degraded: e.GetDegraded(),
		Partitions: len(e.GetPartitionGroups()), Groups: e.GetPartitionGroups(), Counts: c,
	}
}

// consoleEntity is one entity: its properties as the catalog's one
// mapping describes them, and its counts.
func (g *Gateway) consoleEntity(ctx context.Context, name string) (any, error) {
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		return nil, err
	}
	out := entityOf(e, g.counts(ctx, e))
	d := placementpb.Describe(e.GetProperties())
	out.Properties = map[string]any{
		"LockDuration":                        placementpb.FormatISODuration(d.LockDuration),
		"MaxDeliveryCount":                    d.MaxDeliveryCount,
		"DefaultMessageTimeToLive":            placementpb.FormatISODuration(d.DefaultMessageTimeToLive),
		"DeadLetteringOnMessageExpiration":    d.DeadLetteringOnMessageExpiration,
		"RequiresDuplicateDetection":          d.RequiresDuplicateDetection,
		"DuplicateDetectionHistoryTimeWindow": placementpb.FormatISODuration(d.DuplicateDetectionHistoryTimeWindow),
		"RequiresSession":                     d.RequiresSession,
		"EnablePartitioning":                  d.EnablePartitioning,
		"MaxSizeInMegabytes":                  d.MaxSizeInMegabytes,
		"MaxMessageSizeInKilobytes":           d.MaxMessageSizeInKilobytes,
		"UserMetadata":                        d.UserMetadata,
		"CreatedAt":                           atomTime(msTime(e.GetCreatedAtMs())),
		"UpdatedAt":                           atomTime(msTime(e.GetUpdatedAtMs())),
	}
	return out, nil
}

// messageJSON is a peeked message as the console shows it.
type messageJSON struct {
	SequenceNumber   uint64         `json:"sequenceNumber"`
	Partition        uint32         `json:"partition"`
	EnqueuedTime     string         `json:"enqueuedTime"`
	State            string         `json:"state"`
	DeliveryCount    uint32         `json:"deliveryCount"`
	MessageID        string         `json:"messageId,omitempty"`
	SessionID        string         `json:"sessionId,omitempty"`
	CorrelationID    string         `json:"correlationId,omitempty"`
	Subject          string         `json:"subject,omitempty"`
	ContentType      string         `json:"contentType,omitempty"`
	Size             int64          `json:"size"`
	Properties       map[string]any `json:"properties,omitempty"`
	Body             string         `json:"body"`
	BodyEncoding     string         `json:"bodyEncoding"` // text, base64 or value
	BodyTruncated    bool           `json:"bodyTruncated,omitempty"`
	DeadLetterReason string         `json:"deadLetterReason,omitempty"`
	DeadLetterDesc   string         `json:"deadLetterDescription,omitempty"`
	DeadLetterSource string         `json:"deadLetterSource,omitempty"`
}

// bodyPreview bounds the body the console shows of a message. The
// partitions are asked for bodies cut to it (PeekRequest.
// body_prefix_bytes), with the whole size beside them, so that a page of
// large messages costs the gateway and the node a page of previews; a
// node that predates the cut answers whole messages, cut here.
const bodyPreview = 4096

// consoleMessages peeks an entity's messages (or its dead-letter
// queue's): up to n from each partition, each from where from says.
func (g *Gateway) consoleMessages(ctx context.Context, r *http.Request) (any, error) {
	if g.cfg.Messages == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotImplemented, errNoMessages)
	}
	qs := r.URL.Query()
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: qs.Get("name")})
	if err != nil {
		return nil, err
	}
	sub := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if qs.Get("dlq") == "1" || qs.Get("dlq") == "true" {
		sub = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	n := 20
	if v := qs.Get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n <= 0 || n > 250 {
			return nil, fmt.Errorf("%w: n=%q: a count from 1 to 250", ErrBadProperty, v)
		}
	}
	// from: sequence numbers, comma-separated, each where its partition
	// (a sequence number names it in its top 16 bits) continues; the
	// partitions not named start at their beginning. The console pages
	// with one per partition: the last it showed of each, plus one.
	from := map[uint32]uint64{}
	for _, v := range strings.Split(qs.Get("from"), ",") {
		if v == "" {
			continue
		}
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: from=%q: not a sequence number", ErrBadProperty, v)
		}
		from[partitionpb.PartitionOfSequence(seq)] = seq
	}
	out := []messageJSON{}
	for p := range e.GetPartitionGroups() {
		msgs, err := g.cfg.Messages.Peek(ctx, e, &partitionpb.PeekRequest{
			Partition: uint32(p), SubQueue: sub, FromSequenceNumber: from[uint32(p)], MaxCount: uint32(n), BodyPrefixBytes: bodyPreview,
		})
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			out = append(out, messageOf(m))
		}
	}
	return out, nil
}

func messageOf(m *partitionpb.Message) messageJSON {
	out := messageJSON{
		SequenceNumber: m.SequenceNumber, Partition: partitionpb.PartitionOfSequence(m.SequenceNumber),
		EnqueuedTime:  time.UnixMilli(m.EnqueuedTimeMs).UTC().Format(time.RFC3339Nano),
		State:         strings.ToLower(strings.TrimPrefix(m.State.String(), "MESSAGE_STATE_")),
		DeliveryCount: m.DeliveryCount, MessageID: m.MessageId, SessionID: m.SessionId, Size: m.Size,
		DeadLetterReason: m.DeadLetterReason, DeadLetterDesc: m.DeadLetterDescription, DeadLetterSource: m.DeadLetterSource,
		BodyTruncated: m.BodyTruncated,
	}
	if out.Size == 0 { // a node that predates Message.size: the message is whole
		out.Size = int64(len(m.Header) + len(m.Annotations) + len(m.Bare))
	}
	var am amqp.Message
	if err := decodeMessage(&am, m.Bare); err != nil {
		out.Body, out.BodyEncoding = "(the message does not decode: "+err.Error()+")", "value"
		return out
	}
	if p := am.Properties; p != nil {
		out.CorrelationID, out.Subject, out.ContentType = idString(p.CorrelationID), deref(p.Subject), deref(p.ContentType)
	}
	if len(am.ApplicationProperties) > 0 {
		out.Properties = make(map[string]any, len(am.ApplicationProperties))
		for k, v := range am.ApplicationProperties {
			switch v := v.(type) {
			case string, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, nil:
				out.Properties[k] = v
			case float32, float64:
				// JSON has no NaN or infinities: those are written as text.
				if f := reflect.ValueOf(v).Float(); math.IsNaN(f) || math.IsInf(f, 0) {
					out.Properties[k] = fmt.Sprint(v)
				} else {
					out.Properties[k] = v
				}
			case time.Time:
				out.Properties[k] = v.UTC().Format(time.RFC3339Nano)
			default:
				out.Properties[k] = fmt.Sprint(v)
			}
		}
	}
	switch {
	case len(am.Data) > 0:
		var body []byte
		for _, d := range am.Data {
			body = append(body, d...)
		}
		if len(body) > bodyPreview {
			body, out.BodyTruncated = body[:bodyPreview], true
		}
		if text := wholeRunes(body); out.BodyTruncated && utf8.Valid(text) {
			out.Body, out.BodyEncoding = string(text), "text"
		} else if utf8.Valid(body) {
			out.Body, out.BodyEncoding = string(body), "text"
		} else {
			out.Body, out.BodyEncoding = base64.StdEncoding.EncodeToString(body), "base64"
		}
	case am.Value != nil:
		out.Body, out.BodyEncoding = fmt.Sprint(am.Value), "value"
	case len(am.Sequence) > 0:
		out.Body, out.BodyEncoding = fmt.Sprint(am.Sequence), "value"
	}
	return out
}

// consoleAction is the body of a console POST.
type consoleAction struct {
	Name string `json:"name"`
	// create
	Kind            string `json:"kind"` // queue, topic, subscription
	Partitioned     bool   `json:"partitioned"`
	RequiresSession bool   `json:"requiresSession"`
	MaxDelivery     uint32 `json:"maxDeliveryCount"`
	// purge
	DeadLetter bool `json:"deadLetter"`
	// redrive
	Filter   string   `json:"filter"`
	Max      int      `json:"max"`
	Rate     float64  `json:"rate"`
	Sequence []uint64 `json:"sequence"`
	// update: description elements and their new text, e.g.
	// {"LockDuration": "PT30S", "Status": "Disabled"}
	Properties map[string]string `json:"properties"`
}

func (g *Gateway) consoleAct(ctx context.Context, api string, in consoleAction) (any, error) {
	if in.Name == "" {
		return nil, fmt.Errorf("%w: no entity name", ErrBadProperty)
	}
	if api == "create" {
		return g.consoleCreate(ctx, in)
	}
	if api == "update" {
		return g.consoleUpdate(ctx, in)
	}
	if api == "delete" {
		if _, err := g.cfg.Catalog.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: in.Name}); err != nil {
			return nil, err
		}
		return map[string]string{"deleted": in.Name}, nil
	}
	if g.cfg.Messages == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotImplemented, errNoMessages)
	}
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: in.Name})
	if err != nil {
		return nil, err
	}
	// The loop runs within the request: it stops a little before the
	// request's time runs out and says how far it got (what it did stays
	// done); the CLI has no such bound.
	budget := g.cfg.RequestTimeout - g.cfg.RequestTimeout/10
	lctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	partial := func(n int, err error, key string) (any, error) {
		if err != nil && lctx.Err() != nil && ctx.Err() == nil {
			return map[string]any{key: n, "stopped": fmt.Sprintf("stopped after %v, the console's bound on one request: run it again for the rest, or use the CLI", budget)}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{key: n}, nil
	}
	if api == "purge" {
		n, err := Purge(lctx, g.cfg.Messages, e, PurgeOptions{DeadLetter: in.DeadLetter})
		return partial(n, err, "purged")
	}
	if in.Rate < 0 || in.Max < 0 {
		return nil, fmt.Errorf("%w: rate and max are not negative", ErrBadProperty)
	}
	n, err := Redrive(lctx, g.cfg.Messages, e, RedriveOptions{Filter: in.Filter, Max: in.Max, Rate: in.Rate, Sequence: in.Sequence})
	return partial(n, err, "moved")
}

// consoleCreate creates an entity with the catalog's defaults and what
// the form sets, through the same descriptions the ATOM API maps.
func (g *Gateway) consoleCreate(ctx context.Context, in consoleAction) (any, error) {
	req := &placementpb.CreateEntityRequest{Name: in.Name}
	switch in.Kind {
	case "queue", "":
		req.Kind = placementpb.EntityKind_ENTITY_KIND_QUEUE
		req.Properties = placementpb.QueueDescription{EnablePartitioning: in.Partitioned, RequiresSession: in.RequiresSession, MaxDeliveryCount: in.MaxDelivery}.Properties()
	case "topic":
		req.Kind = placementpb.EntityKind_ENTITY_KIND_TOPIC
		req.Properties = placementpb.TopicDescription{EnablePartitioning: in.Partitioned}.Properties()
	case "subscription":
		topic, sub, ok := strings.Cut(in.Name, "/")
		if !ok || topic == "" || sub == "" || strings.Contains(sub, "/") {
			return nil, fmt.Errorf("%w: a subscription is named TOPIC/NAME", ErrBadProperty)
		}
		req.Name = subscriptionName(topic, sub)
		req.Kind = placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
		req.Properties = placementpb.SubscriptionDescription{RequiresSession: in.RequiresSession, MaxDeliveryCount: in.MaxDelivery}.Properties()
	default:
		return nil, fmt.Errorf("%w: kind %q is not queue, topic or subscription", ErrBadProperty, in.Kind)
	}
	e, err := g.cfg.Catalog.CreateEntity(ctx, req)
	if err != nil {
		return nil, err
	}
	return entityOf(e, &Counts{}), nil
}

// wholeRunes drops the start of a UTF-8 character that a cut left at the
// end of b, so that a text body cut for its preview still reads as text.
func wholeRunes(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
		if r, n := utf8.DecodeLastRune(b); r != utf8.RuneError || n > 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}
