package catalog

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/sas"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// MaxRulesPerScope bounds the authorization rules of the namespace and of
// each entity: Azure allows 12. The gateway checks a description's rules
// against the same bound before it asks for any.
const MaxRulesPerScope = sas.MaxRulesPerScope

// ruleKey identifies a rule: its scope (Key of the entity, "" for the
// namespace) and its name, ignoring case.
type ruleKey struct{ scope, name string }

func ruleKeyOf(r *pb.AuthorizationRule) ruleKey {
	return ruleKey{Key(r.Entity), strings.ToLower(r.Name)}
}

// SASRule converts a catalog rule to what placement/sas validates with.
func SASRule(r *pb.AuthorizationRule) sas.Rule {
	return sas.Rule{Name: r.Name, Entity: r.Entity, Rights: sas.Rights(r.Rights), PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey}
}

// checkRule reports what makes a rule unusable, without naming its keys.
func checkRule(r *pb.AuthorizationRule) error {
	if r == nil {
		return fmt.Errorf("%w: no rule", ErrInvalidAuthRule)
	}
	if r.Rights > 0xff {
		return fmt.Errorf("%w: rights %#x", ErrInvalidAuthRule, r.Rights)
	}
	if err := SASRule(r).Check(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAuthRule, strings.TrimPrefix(err.Error(), "sas: "))
	}
	return nil
}

func (s *State) putRule(now int64, c *pb.PutAuthorizationRuleCommand) (*pb.AuthorizationRule, error) {
	if err := checkRule(c.GetRule()); err != nil {
		return nil, err
	}
	r := proto.Clone(c.Rule).(*pb.AuthorizationRule)
	if r.Entity != "" {
		e := s.byName(r.Entity)
		if e == nil {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, r.Entity)
		}
		if e.Kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
			return nil, fmt.Errorf("%w: a subscription has its topic's rules", ErrInvalidAuthRule)
		}
		r.Entity = e.Name
	}
	k := ruleKeyOf(r)
	cur := s.rules[k]
	if cur != nil && c.CreateOnly {
		return nil, fmt.Errorf("%w: %s", ErrAuthRuleExists, r.Name)
	}
	if cur == nil && s.rulesIn(k.scope) >= MaxRulesPerScope {
		return nil, fmt.Errorf("%w: %d on %q", ErrTooManyAuthRules, MaxRulesPerScope, r.Entity)
	}
	r.CreatedAtMs, r.UpdatedAtMs = now, now
	if cur != nil {
		r.CreatedAtMs = cur.CreatedAtMs
	}
	s.rules[k] = r
	s.touchRules()
	return proto.Clone(r).(*pb.AuthorizationRule), nil
}

func (s *State) deleteRule(c *pb.DeleteAuthorizationRuleRequest) error {
	k := ruleKey{Key(c.Entity), strings.ToLower(c.Name)}
	if s.rules[k] == nil {
		return fmt.Errorf("%w: %s", ErrAuthRuleNotFound, c.Name)
	}
	delete(s.rules, k)
	s.touchRules()
	return nil
}

// dropRules removes the rules of a deleted entity; it reports whether
// there were any.
func (s *State) dropRules(entity string) bool {
	scope, dropped := Key(entity), false
	for k := range s.rules {
		if k.scope == scope {
			delete(s.rules, k)
			dropped = true
		}
	}
	return dropped
}

func (s *State) rulesIn(scope string) int {
	n := 0
	for k := range s.rules {
		if k.scope == scope {
			n++
		}
	}
	return n
}

// AuthorizationRules returns copies of the rules of one scope (entity ""
// is the namespace), or of every scope with all, ordered by scope and
// name.
func (s *State) AuthorizationRules(entity string, all bool) []*pb.AuthorizationRule {
	scope := Key(entity)
	var out []*pb.AuthorizationRule
	for k, r := range s.rules {
		if all || k.scope == scope {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *pb.AuthorizationRule) int {
		ka, kb := ruleKeyOf(a), ruleKeyOf(b)
		return cmp.Or(cmp.Compare(ka.scope, kb.scope), cmp.Compare(ka.name, kb.name))
	})
	return cloneAll(out)
}
