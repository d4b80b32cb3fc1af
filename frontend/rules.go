package frontend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Rule management on a subscription's $management node: add-rule,
// remove-rule and enumerate-rules, which the JavaScript and .NET SDKs'
// rule managers send. The request maps are read into
// placementpb.RuleDescription, the same mapping the admin API and
// Config.json go through, and the catalog compiles and stores the rule.

// RuleBackend is what a Backend offers for a subscription's rules; the
// front-end answers the rule operations with not-implemented on a Backend
// without it. Calls go to the catalog, not to the partitions: a rule
// reaches the partitions with the subscription's next config.
type RuleBackend interface {
	// AddRule adds a rule to the subscription (ErrRuleExists when one of
	// that name is there, ErrInvalid with the reason when the filter or
	// action does not compile).
	AddRule(ctx context.Context, subscription string, r *placementpb.Rule) error
	// RemoveRule removes a rule (ErrRuleNotFound when there is none).
	RemoveRule(ctx context.Context, subscription, name string) error
	// Rules returns the subscription's rules as the catalog has them
	// committed now, ordered by name.
	Rules(ctx context.Context, subscription string) ([]*placementpb.Rule, error)
}

// Errors of a RuleBackend.
var (
	ErrRuleExists   = errors.New("frontend: a rule of that name exists")
	ErrRuleNotFound = errors.New("frontend: rule not found")
)

const condEntityAlreadyExists amqp.Symbol = "com.microsoft:entity-already-exists"

var (
	failRuleExists   = failure{condEntityAlreadyExists, 409, false, "the subscription already has a rule of that name"}
	failRuleNotFound = failure{amqp.ErrCondNotFound, 404, false, "the subscription has no rule of that name"}
	failBadRule      = failure{amqp.ErrCondInvalidField, 400, false, "the rule is not valid"}
)

// ruleFailure maps a RuleBackend's error to what the client sees.
func ruleFailure(err error) failure {
	switch {
	case errors.Is(err, ErrRuleExists):
		return failRuleExists
	case errors.Is(err, ErrRuleNotFound):
		return failRuleNotFound
	case errors.Is(err, ErrInvalid):
		return failBadRule
	}
	return errFailure(err)
}

// Descriptor codes of the rule descriptions an enumerate-rules answer
// carries (Service Bus's AMQP encoding of RuleDescription and its parts).
const (
	descRuleDescription   uint64 = 0x0000013700000004
	descEmptyRuleAction   uint64 = 0x0000013700000005
	descSQLRuleAction     uint64 = 0x0000013700000006
	descSQLFilter         uint64 = 0x0000001370000006
	descTrueFilter        uint64 = 0x0000001370000007
	descFalseFilter       uint64 = 0x0000001370000008
	descCorrelationFilter uint64 = 0x0000001370000009
)

// sqlCompatibilityLevel is the compatibility level Service Bus reports for
// SQL filters and actions; we have only the one language.
const sqlCompatibilityLevel int32 = 20

// maxEnumerateRules caps one enumerate-rules answer. A subscription holds
// at most 2,000 rules (the catalog's limit), so one page takes them all.
const maxEnumerateRules = 2000

func (c *conn) rules() RuleBackend {
	rb, _ := c.srv.cfg.Backend.(RuleBackend)
	return rb
}

// ruleTarget checks that a rule operation addresses a subscription (not
// its dead-letter queue, not a queue or topic) and returns the backend.
func (c *conn) ruleTarget(e *placementpb.Entity, q partitionpb.SubQueue, req *rpcRequest) (RuleBackend, bool) {
	rb := c.rules()
	if rb == nil {
		req.fail(failNotImpl, "rule management")
		return nil, false
	}
	if e.GetKind() != placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION || q != partitionpb.SubQueue_SUB_QUEUE_MAIN {
		req.fail(failInvalid, fmt.Sprintf("%s is not a subscription: rules belong to subscriptions", e.GetName()))
		return nil, false
	}
	return rb, true
}

// addRule: rule-name, rule-description {sql-filter | correlation-filter,
// sql-rule-action} → 200.
func (c *conn) addRule(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	rb, ok := c.ruleTarget(e, q, req)
	if !ok {
		return
	}
	r, err := decodeAddRule(body)
	if err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	if err := rb.AddRule(ctx, e.GetName(), r); err != nil {
		req.fail(ruleFailure(err), err.Error())
		return
	}
	req.respond(200, "OK", nil)
}

// removeRule: rule-name → 200.
func (c *conn) removeRule(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	rb, ok := c.ruleTarget(e, q, req)
	if !ok {
		return
	}
	name, err := stringKeyField(body, "rule-name")
	if err == nil && name == "" {
		err = errors.New("rule-name is required")
	}
	if err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	if err := rb.RemoveRule(ctx, e.GetName(), name); err != nil {
		req.fail(ruleFailure(err), err.Error())
		return
	}
	req.respond(200, "OK", nil)
}

// enumerateRules: top, skip → 200 {rules: list of {rule-description:
// described RuleDescription}}, 204 when there are none.
func (c *conn) enumerateRules(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	rb, ok := c.ruleTarget(e, q, req)
	if !ok {
		return
	}
	skip, top := int64(0), int64(maxEnumerateRules)
	var err error
	if v, ok := body.Get("skip"); ok && v != nil {
		if skip, err = intField(body, "skip", 0, 1<<31-1); err != nil {
			req.fail(failBadField, err.Error())
			return
		}
	}
	if v, ok := body.Get("top"); ok && v != nil {
		if top, err = intField(body, "top", 0, 1<<31-1); err != nil {
			req.fail(failBadField, err.Error())
			return
		}
	}
	rules, err := rb.Rules(ctx, e.GetName())
	if err != nil {
		req.fail(ruleFailure(err), err.Error())
		return
	}
	rules = rules[min(int(skip), len(rules)):]
	rules = rules[:min(int(min(top, maxEnumerateRules)), len(rules))]
	if len(rules) == 0 {
		req.respond(204, "No Content", amqp.Map{{Key: "rules", Value: []any{}}})
		return
	}
	out := make([]any, len(rules))
	for i, r := range rules {
		out[i] = amqp.Map{{Key: "rule-description", Value: encodeRule(r)}}
	}
	req.respond(200, "OK", amqp.Map{{Key: "rules", Value: out}})
}

// encodeRule renders a stored rule as Service Bus's described
// RuleDescription: [filter, action, name, created-at].
func encodeRule(r *placementpb.Rule) amqp.Described {
	var filter amqp.Described
	switch f := r.GetFilter().(type) {
	case *placementpb.Rule_SqlFilter:
		filter = amqp.Described{Descriptor: descSQLFilter, Value: []any{f.SqlFilter.GetExpression(), sqlCompatibilityLevel}}
	case *placementpb.Rule_CorrelationFilter:
		cf := f.CorrelationFilter
		var props any
		if len(cf.GetProperties()) > 0 {
			m := amqp.Map{}
			for k, v := range placementpb.RuleValuesOf(cf.GetProperties()) {
				m = append(m, amqp.Pair{Key: k, Value: amqpRuleValue(v)})
			}
			props = m
		}
		filter = amqp.Described{Descriptor: descCorrelationFilter, Value: []any{
			orNull(cf.GetCorrelationId()), orNull(cf.GetMessageId()), orNull(cf.GetTo()), orNull(cf.GetReplyTo()),
			orNull(cf.GetSubject()), orNull(cf.GetSessionId()), orNull(cf.GetReplyToSessionId()), orNull(cf.GetContentType()),
			props,
		}}
	case *placementpb.Rule_FalseFilter:
		filter = amqp.Described{Descriptor: descFalseFilter, Value: []any{"1=0", sqlCompatibilityLevel}}
	default: // true filter
		filter = amqp.Described{Descriptor: descTrueFilter, Value: []any{"1=1", sqlCompatibilityLevel}}
	}
	action := amqp.Described{Descriptor: descEmptyRuleAction, Value: []any{}}
	if a := r.GetAction(); a != nil {
		action = amqp.Described{Descriptor: descSQLRuleAction, Value: []any{a.GetExpression(), sqlCompatibilityLevel}}
	}
	return amqp.Described{Descriptor: descRuleDescription, Value: []any{
		filter, action, r.GetName(), time.UnixMilli(r.GetCreatedAtMs()).UTC(),
	}}
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// amqpRuleValue turns a rule value back into what AMQP carries: a
// duration as its ticks would be .NET's; we send milliseconds as a long,
// the same view the filter has of it.
func amqpRuleValue(v any) any {
	if d, ok := v.(time.Duration); ok {
		return d.Milliseconds()
	}
	return v
}

// decodeAddRule reads an add-rule request into the catalog's rule.
func decodeAddRule(body amqp.Map) (*placementpb.Rule, error) {
	name, err := stringKeyField(body, "rule-name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("rule-name is required")
	}
	v, _ := getKey(body, "rule-description")
	desc, ok := v.(amqp.Map)
	if !ok {
		return nil, fmt.Errorf("rule-description must be a map, got %s", typeOf(v, v != nil))
	}
	d := placementpb.RuleDescription{Name: name}
	sqlV, hasSQL := getKey(desc, "sql-filter")
	corrV, hasCorr := getKey(desc, "correlation-filter")
	hasSQL, hasCorr = hasSQL && sqlV != nil, hasCorr && corrV != nil
	switch {
	case hasSQL && hasCorr:
		return nil, errors.New("rule-description holds both a sql-filter and a correlation-filter")
	case hasSQL:
		m, ok := sqlV.(amqp.Map)
		if !ok {
			return nil, fmt.Errorf("sql-filter must be a map, got %s", typeOf(sqlV, true))
		}
		d.FilterType = "Sql"
		if d.SqlExpression, err = stringKeyField(m, "expression"); err != nil {
			return nil, fmt.Errorf("sql-filter: %w", err)
		}
		if d.SqlParameters, err = ruleValueMap(m, "parameters"); err != nil {
			return nil, fmt.Errorf("sql-filter: %w", err)
		}
	case hasCorr:
		m, ok := corrV.(amqp.Map)
		if !ok {
			return nil, fmt.Errorf("correlation-filter must be a map, got %s", typeOf(corrV, true))
		}
		d.FilterType = "Correlation"
		c := &d.Correlation
		for _, f := range []struct {
			key string
			dst *string
		}{
			{"correlation-id", &c.CorrelationID}, {"message-id", &c.MessageID}, {"to", &c.To},
			{"reply-to", &c.ReplyTo}, {"label", &c.Label}, {"subject", &c.Subject}, {"session-id", &c.SessionID},
			{"reply-to-session-id", &c.ReplyToSessionID}, {"content-type", &c.ContentType},
		} {
			if *f.dst, err = stringKeyField(m, f.key); err != nil {
				return nil, fmt.Errorf("correlation-filter: %w", err)
			}
		}
		if c.Properties, err = ruleValueMap(m, "properties"); err != nil {
			return nil, fmt.Errorf("correlation-filter: %w", err)
		}
	default:
		// Service Bus takes a rule without a filter as a true filter.
		d.FilterType = "True"
	}
	if av, ok := getKey(desc, "sql-rule-action"); ok && av != nil {
		m, ok := av.(amqp.Map)
		if !ok {
			return nil, fmt.Errorf("sql-rule-action must be a map, got %s", typeOf(av, true))
		}
		if d.ActionExpression, err = stringKeyField(m, "expression"); err != nil {
			return nil, fmt.Errorf("sql-rule-action: %w", err)
		}
		if d.ActionParameters, err = ruleValueMap(m, "parameters"); err != nil {
			return nil, fmt.Errorf("sql-rule-action: %w", err)
		}
	}
	return d.Rule()
}

// getKey looks a key up as a string or as a symbol: the SDKs differ.
func getKey(m amqp.Map, key string) (any, bool) {
	if v, ok := m.Get(key); ok {
		return v, true
	}
	return m.Get(amqp.Symbol(key))
}

// stringKeyField reads an optional string (or symbol) under key; absent
// or null is "".
func stringKeyField(m amqp.Map, key string) (string, error) {
	v, ok := getKey(m, key)
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case amqp.Symbol:
		return string(x), nil
	}
	return "", fmt.Errorf("%s must be a string, got %s", key, typeOf(v, ok))
}

// ruleValueMap reads a map of filter parameters or correlation
// properties: string keys, values of the types a RuleValue holds.
func ruleValueMap(m amqp.Map, key string) (map[string]any, error) {
	v, _ := getKey(m, key)
	if v == nil {
		return nil, nil
	}
	pm, ok := v.(amqp.Map)
	if !ok {
		return nil, fmt.Errorf("%s must be a map, got %s", key, typeOf(v, true))
	}
	out := make(map[string]any, len(pm))
	for _, p := range pm {
		var k string
		switch x := p.Key.(type) {
		case string:
			k = x
		case amqp.Symbol:
			k = string(x)
		default:
			return nil, fmt.Errorf("%s: keys must be strings, got %s", key, typeOf(p.Key, true))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s: %q given twice", key, k)
		}
		val, err := ruleValueOf(p.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", key, k, err)
		}
		if val == nil {
			continue // a property the SDK sent as undefined
		}
		out[k] = val
	}
	return out, nil
}

// ruleValueOf narrows an AMQP value to the Go types
// placementpb.NewRuleValue takes.
func ruleValueOf(v any) (any, error) {
	switch x := v.(type) {
	case nil, string, bool, int32, int64, float64, time.Time:
		return x, nil
	case amqp.Symbol:
		return string(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > 1<<63-1 {
			return nil, fmt.Errorf("%d is out of range", x)
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	}
	return nil, fmt.Errorf("values of type %s cannot be rule values", typeOf(v, true))
}
