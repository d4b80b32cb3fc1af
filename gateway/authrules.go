package gateway

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// A queue's or topic's <AuthorizationRules> are the catalog's SAS rules
// of that entity (placementpb.AuthorizationRule with Entity set), the
// very rules `quorumbus auth-rule --entity` manages, changed by the same
// catalog commands (PutAuthorizationRule, DeleteAuthorizationRule). This
// file is the one mapping between the two: decodeAuthorizationRules reads
// what a description asks for, planAuthorizationRules turns it into
// catalog changes against what the entity has, describeAuthorizationRules
// writes the catalog's rules back. A subscription has its topic's rules
// and none of its own.
//
// The keys are secrets: no error or log line built here names one.

// rightNames are Service Bus's AccessRights, as the admin API spells them.
var rightNames = []struct {
	name  string
	right sas.Rights
}{{"Listen", sas.Listen}, {"Send", sas.Send}, {"Manage", sas.Manage}}

// sasRuleType is the only xsi:type of an authorization rule Service Bus
// still serves (AllowRule and the like were its ACS days').
const sasRuleType = "SharedAccessAuthorizationRule"

// Service Bus's claim type and value for a SAS rule; the clients send
// them and read them back.
const (
	sasClaimType  = "SharedAccessKey"
	sasClaimValue = "None"
)

// authorizationRulesOut is the <AuthorizationRules> of a description, in
// the element order of Service Bus's own serializer (the .NET client's
// SharedAccessAuthorizationRule.Serialize), with the times GET answers.
type authorizationRulesOut struct {
	Rules []authorizationRuleOut `xml:"AuthorizationRule"`
}

type authorizationRuleOut struct {
	// Type is xsi:type; the descriptions declare the i prefix.
	Type         string   `xml:"i:type,attr"`
	ClaimType    string   `xml:"ClaimType"`
	ClaimValue   string   `xml:"ClaimValue"`
	Rights       []string `xml:"Rights>AccessRights"`
	CreatedTime  string   `xml:"CreatedTime"`
	ModifiedTime string   `xml:"ModifiedTime"`
	KeyName      string   `xml:"KeyName"`
	PrimaryKey   string   `xml:"PrimaryKey"`
	// SecondaryKey is optional in the catalog (a rule from a rules file
	// may have none); an empty element would fail the .NET client, which
	// refuses a blank key, so none is written.
	SecondaryKey string `xml:"SecondaryKey,omitempty"`
}

// describeAuthorizationRules writes an entity's rules, keys included
// (every admin request holds the Manage right, as on Service Bus).
func describeAuthorizationRules(rules []*placementpb.AuthorizationRule) authorizationRulesOut {
	out := authorizationRulesOut{Rules: make([]authorizationRuleOut, 0, len(rules))}
	for _, r := range rules {
		var rights []string
		for _, n := range rightNames {
			if sas.Rights(r.GetRights())&n.right != 0 {
				rights = append(rights, n.name)
			}
		}
		out.Rules = append(out.Rules, authorizationRuleOut{
			Type: sasRuleType, ClaimType: sasClaimType, ClaimValue: sasClaimValue, Rights: rights,
			CreatedTime:  atomTime(msTime(r.GetCreatedAtMs())),
			ModifiedTime: atomTime(msTime(r.GetUpdatedAtMs())),
			KeyName:      r.GetName(), PrimaryKey: r.GetPrimaryKey(), SecondaryKey: r.GetSecondaryKey(),
		})
	}
	return out
}

func (a *authorizationRulesOut) writeAtom(x *xmlWriter) {
	x.start("AuthorizationRules")
	for i := range a.Rules {
		r := &a.Rules[i]
		x.start("AuthorizationRule", "i:type", r.Type)
		x.elem("ClaimType", r.ClaimType)
		x.elem("ClaimValue", r.ClaimValue)
		if len(r.Rights) > 0 {
			x.start("Rights")
			for _, right := range r.Rights {
				x.elem("AccessRights", right)
			}
			x.end("Rights")
		}
		x.elem("CreatedTime", r.CreatedTime)
		x.elem("ModifiedTime", r.ModifiedTime)
		x.elem("KeyName", r.KeyName)
		x.elem("PrimaryKey", r.PrimaryKey)
		x.elemOmit("SecondaryKey", r.SecondaryKey)
		x.end("AuthorizationRule")
	}
	x.end("AuthorizationRules")
}

// authorizationRuleIn is one <AuthorizationRule> as sent.
type authorizationRuleIn struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Fields  []rawField `xml:",any"`
}

// readOnlyRuleFields are what GET answers of a rule and a client sends
// back unchanged: the catalog keeps its own times.
var readOnlyRuleFields = map[string]bool{"CreatedTime": true, "ModifiedTime": true, "Revision": true}

// decodeAuthorizationRules reads the rules a description's
// <AuthorizationRules> asks for: each with its name and rights, and the
// keys it gives ("" where it leaves one out: planAuthorizationRules keeps
// the rule's key or makes one). What is wrong with a rule is an error
// naming the rule, never its keys.
func decodeAuthorizationRules(f rawField) ([]*placementpb.AuthorizationRule, error) {
	var list struct {
		Rules []authorizationRuleIn `xml:",any"`
	}
	// The description parsed, so its inner XML does too; a prefix it
	// declared above (xsi's) is read as the bare prefix, which is enough.
	if err := xml.Unmarshal([]byte("<AuthorizationRules>"+f.Inner+"</AuthorizationRules>"), &list); err != nil {
		return nil, errors.New("malformed rules")
	}
	if len(list.Rules) > sas.MaxRulesPerScope {
		return nil, fmt.Errorf("%d rules, at most %d on an entity", len(list.Rules), sas.MaxRulesPerScope)
	}
	out := make([]*placementpb.AuthorizationRule, 0, len(list.Rules))
	names := make(map[string]bool, len(list.Rules))
	for i, in := range list.Rules {
		r, err := decodeAuthorizationRule(in)
		if err != nil {
			if r.GetName() != "" {
				return nil, fmt.Errorf("rule %q: %w", r.GetName(), err)
			}
			return nil, fmt.Errorf("rule %d: %w", i+1, err)
		}
		k := strings.ToLower(r.Name)
		if names[k] {
			return nil, fmt.Errorf("rule %q given twice (names ignore case)", r.Name)
		}
		names[k] = true
		out = append(out, r)
	}
	return out, nil
}

// decodeAuthorizationRule reads one rule; on an error it returns what it
// read so far, so that the error can name the rule.
func decodeAuthorizationRule(in authorizationRuleIn) (*placementpb.AuthorizationRule, error) {
	r := &placementpb.AuthorizationRule{}
	if in.XMLName.Local != "AuthorizationRule" {
		return r, fmt.Errorf("<%s> is not an <AuthorizationRule>", in.XMLName.Local)
	}
	for _, a := range in.Attrs {
		if a.Name.Local == "type" && a.Name.Space != "xmlns" {
			// The value may carry a prefix of its own (p:Type).
			v := strings.TrimSpace(a.Value)
			if v[strings.IndexByte(v, ':')+1:] != sasRuleType {
				return r, fmt.Errorf("type %q: only %s is supported", v, sasRuleType)
			}
		}
	}
	// Read KeyName first, so that every later error names the rule.
	for _, f := range in.Fields {
		if f.XMLName.Local == "KeyName" {
			r.Name = strings.TrimSpace(f.Text)
		}
	}
	seen := make(map[string]bool, len(in.Fields))
	for _, f := range in.Fields {
		name, text := f.XMLName.Local, strings.TrimSpace(f.Text)
		if seen[name] {
			return r, fmt.Errorf("<%s> given twice", name)
		}
		seen[name] = true
		if readOnlyRuleFields[name] || f.isNil() {
			continue
		}
		if name != "Rights" && f.hasChildren() {
			return r, fmt.Errorf("%s: expected a value, got elements", name)
		}
		switch name {
		case "ClaimType":
			if text != sasClaimType {
				return r, fmt.Errorf("ClaimType %q: a SAS rule's is %s", text, sasClaimType)
			}
		case "ClaimValue":
			if text != "" && text != sasClaimValue {
				return r, fmt.Errorf("ClaimValue %q: a SAS rule's is %s", text, sasClaimValue)
			}
		case "Rights":
			rights, err := decodeRights(f)
			if err != nil {
				return r, err
			}
			r.Rights = uint32(rights)
		case "KeyName":
		case "PrimaryKey":
			r.PrimaryKey = text
		case "SecondaryKey":
			r.SecondaryKey = text
		default:
			return r, fmt.Errorf("unknown element <%s> of a rule", name)
		}
	}
	switch {
	case r.Name == "":
		return r, errors.New("no KeyName")
	case len(r.Name) > sas.MaxNameLength || !utf8.ValidString(r.Name):
		return r, fmt.Errorf("KeyName: at most %d characters of UTF-8", sas.MaxNameLength)
	case r.Rights == 0:
		return r, errors.New("no Rights: give Listen, Send and/or Manage")
	case len(r.PrimaryKey) > sas.MaxKeyLength || len(r.SecondaryKey) > sas.MaxKeyLength:
		return r, fmt.Errorf("a key is longer than %d characters", sas.MaxKeyLength)
	}
	return r, nil
}

// decodeRights reads <Rights><AccessRights>Listen</AccessRights>...: each
// right once, and Manage only with Listen and Send, as Service Bus wants.
func decodeRights(f rawField) (sas.Rights, error) {
	var list struct {
		Items []rawField `xml:",any"`
	}
	if err := xml.Unmarshal([]byte("<Rights>"+f.Inner+"</Rights>"), &list); err != nil {
		return 0, errors.New("Rights: malformed")
	}
	var rights sas.Rights
	for _, item := range list.Items {
		if item.XMLName.Local != "AccessRights" {
			return 0, fmt.Errorf("Rights: <%s> is not <AccessRights>", item.XMLName.Local)
		}
		text := strings.TrimSpace(item.Text)
		var right sas.Rights
		for _, n := range rightNames {
			if n.name == text {
				right = n.right
			}
		}
		switch {
		case right == 0:
			return 0, fmt.Errorf("Rights: %q is not Listen, Send or Manage", text)
		case rights&right != 0:
			return 0, fmt.Errorf("Rights: %s given twice", text)
		}
		rights |= right
	}
	if rights&sas.Manage != 0 && rights&(sas.Listen|sas.Send) != sas.Listen|sas.Send {
		return 0, errors.New("Rights: Manage requires Listen and Send as well")
	}
	return rights, nil
}

// rulesRequest is a description's <AuthorizationRules>. given is false
// when the description has no such element: an update without it keeps
// the entity's rules (the Go and .NET clients always send the element,
// empty for none; the JavaScript client leaves it out when it read none).
// With it, an update replaces the entity's rules with those given.
type rulesRequest struct {
	given bool
	rules []*placementpb.AuthorizationRule
}

// planRules plans what req asks of entity's rules, against those it has
// (none when creating it); nothing when the description said nothing.
func (g *Gateway) planRules(ctx context.Context, entity string, req rulesRequest, creating bool) (rulesPlan, error) {
	if !req.given {
		return rulesPlan{}, nil
	}
	var have []*placementpb.AuthorizationRule
	if !creating {
		var err error
		if have, err = g.entityRules(ctx, entity); err != nil {
			return rulesPlan{}, err
		}
	}
	return planAuthorizationRules(entity, req.rules, have)
}

// rulesPlan is what makes an entity's rules those a description asks
// for: the rules to put (new or changed, with their keys) and the names
// of those to delete.
type rulesPlan struct {
	put    []*placementpb.AuthorizationRule
	remove []string
}

// planAuthorizationRules compares the rules a description asks for
// (want, as decoded) with those entity has (have) and returns the
// changes, or ErrBadProperty with the reason, before anything changes.
//
// A rule keeps its identity by name (ignoring case). A key the request
// leaves out is the rule's current one, or, for a new rule, a new key
// (32 random bytes in base64, as Service Bus makes them). A key or a name
// the request brings anew must have Service Bus's form (44 characters of
// base64; a name of URL-safe characters), so what Azure refuses is
// refused here; one the rule already has passes as it is, so a rule made
// by the CLI or a rules file survives a client sending it back. A rule
// the request repeats unchanged is left alone (its ModifiedTime stays).
func planAuthorizationRules(entity string, want, have []*placementpb.AuthorizationRule) (rulesPlan, error) {
	var plan rulesPlan
	bad := func(format string, args ...any) error {
		return badProperty("AuthorizationRules", format, args...)
	}
	current := make(map[string]*placementpb.AuthorizationRule, len(have))
	for _, h := range have {
		current[strings.ToLower(h.GetName())] = h
	}
	wanted := make(map[string]bool, len(want))
	for _, w := range want {
		k := strings.ToLower(w.GetName())
		wanted[k] = true
		h := current[k]
		r := proto.Clone(w).(*placementpb.AuthorizationRule)
		r.Entity = entity
		if h == nil && !urlSafeName(r.Name) {
			return plan, bad("rule %q: a name of letters, digits and - _ . ! * ( ) only", r.Name)
		}
		for _, key := range []struct {
			which string
			dst   *string
			was   string
		}{{"PrimaryKey", &r.PrimaryKey, h.GetPrimaryKey()}, {"SecondaryKey", &r.SecondaryKey, h.GetSecondaryKey()}} {
			switch {
			case *key.dst == "" && h != nil:
				*key.dst = key.was
			case *key.dst == "":
				*key.dst = sas.NewKey()
			case h != nil && (*key.dst == h.GetPrimaryKey() || *key.dst == h.GetSecondaryKey()):
				// The rule's own key, whatever its form (swapped keys too).
			case !sas.IsAzureKey(*key.dst):
				return plan, bad("rule %q: %s must be %d characters of base64 (32 bytes), as Service Bus's keys are", r.Name, key.which, sas.KeyLength)
			}
		}
		if err := (sas.Rule{Name: r.Name, Entity: entity, Rights: sas.Rights(r.Rights), PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey}).Check(); err != nil {
			return plan, bad("%s", strings.TrimPrefix(err.Error(), "sas: "))
		}
		if h != nil && h.GetName() == r.Name && h.GetRights() == r.Rights && h.GetPrimaryKey() == r.PrimaryKey && h.GetSecondaryKey() == r.SecondaryKey {
			continue
		}
		plan.put = append(plan.put, r)
	}
	for _, h := range have {
		if !wanted[strings.ToLower(h.GetName())] {
			plan.remove = append(plan.remove, h.GetName())
		}
	}
	return plan, nil
}

// urlSafeName reports whether a rule name is what Service Bus's clients
// accept: characters a URL carries unescaped (the .NET client's check).
func urlSafeName(name string) bool {
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("-_.!*()", c):
		default:
			return false
		}
	}
	return name != ""
}

// entityRules reads an entity's rules from the catalog (on its leader),
// ordered by name.
func (g *Gateway) entityRules(ctx context.Context, entity string) ([]*placementpb.AuthorizationRule, error) {
	resp, err := g.cfg.Catalog.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{Entity: entity})
	return resp.GetRules(), err
}

// rulesByEntity reads every entity's rules in one catalog call, for a
// page of a list, keyed by the entity's lower-case name. The namespace's
// rules are left out: no description carries them.
func (g *Gateway) rulesByEntity(ctx context.Context) (map[string][]*placementpb.AuthorizationRule, error) {
	resp, err := g.cfg.Catalog.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{AllScopes: true})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]*placementpb.AuthorizationRule)
	for _, r := range resp.GetRules() {
		if r.GetEntity() != "" {
			k := strings.ToLower(r.GetEntity())
			out[k] = append(out[k], r)
		}
	}
	return out, nil
}

// async runs f in a goroutine of its own and returns a function that
// waits for its result. Reads of the rules go so, beside a request's
// other reads (the entities of a list page, an entity's counts): each is
// a round trip to the meta leader, which then adds no wait of its own.
// f must end with the request's context.
func async[T any](f func() (T, error)) func() (T, error) {
	var v T
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err = f()
	}()
	return func() (T, error) {
		<-done
		return v, err
	}
}

// applyAuthorizationRules carries out a plan on entity and returns the
// rules it put, as stored. Deletes go first, so that the entity never
// holds more than Service Bus's 12 rules on the way, nor a rule the
// description dropped beside those it adds. A rule already gone is not
// an error. The catalog takes one command per rule: a failure halfway
// leaves some done, and the client's retry of its PUT (which the SDKs
// make on a 503) finishes the work, since a plan is made against what
// the entity has.
func (g *Gateway) applyAuthorizationRules(ctx context.Context, entity string, plan rulesPlan) ([]*placementpb.AuthorizationRule, error) {
	for _, name := range plan.remove {
		_, err := g.cfg.Catalog.DeleteAuthorizationRule(ctx, &placementpb.DeleteAuthorizationRuleRequest{Name: name, Entity: entity})
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, fmt.Errorf("gateway: deleting authorization rule %s of %s: %w", name, entity, err)
		}
	}
	put := make([]*placementpb.AuthorizationRule, 0, len(plan.put))
	for _, r := range plan.put {
		got, err := g.cfg.Catalog.PutAuthorizationRule(ctx, &placementpb.PutAuthorizationRuleRequest{Rule: r})
		if err != nil {
			return nil, fmt.Errorf("gateway: putting authorization rule %s of %s: %w", r.GetName(), entity, err)
		}
		put = append(put, got)
	}
	return put, nil
}

// undoCreate deletes an entity this request created when its rules
// could not all be put, so that the client's retry creates it whole
// rather than finding it (409) without them. It runs past the request's
// own deadline, which may be what failed the rules.
func (g *Gateway) undoCreate(ctx context.Context, name string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := g.cfg.Catalog.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: name}); err != nil {
		g.log.Warn("an entity created without its authorization rules could not be deleted", "entity", name, "rules_err", cause, "err", err)
	}
}
