package catalog

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition/filter"
	"github.com/quorumbus/quorumbus/partition/rules"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Limits of rules, as Azure's.
const (
	MaxRuleNameLength = 50
	MaxRules          = 2000 // per subscription
	// DefaultRuleName is the rule a subscription gets when it is created
	// without one of its own: a true filter.
	DefaultRuleName = "$Default"
)

// CompileRule checks a rule and compiles its filter and action with
// partition/filter; the action is nil when the rule has none. An error
// wraps ErrInvalidRule and, for a text that does not compile, the
// filter's *SyntaxError with the position.
func CompileRule(r *pb.Rule) (filter.Filter, *filter.Action, error) {
	if err := checkRuleName(r.GetName()); err != nil {
		return nil, nil, err
	}
	f, a, err := rules.Compile(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	return f, a, nil
}

// checkRuleName admits 1 to 50 letters, digits, '.', '-' and '_', and
// $Default.
func checkRuleName(name string) error {
	if strings.EqualFold(name, DefaultRuleName) {
		return nil
	}
	if name == "" || len(name) > MaxRuleNameLength {
		return fmt.Errorf("%w: rule name %q: 1 to %d characters", ErrInvalidRule, name, MaxRuleNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%w: rule name %q contains %q", ErrInvalidRule, name, c)
		}
	}
	return nil
}

// DefaultRule is the $Default rule: a true filter, no action.
func DefaultRule() *pb.Rule {
	return &pb.Rule{Name: DefaultRuleName, Filter: &pb.Rule_TrueFilter{TrueFilter: true}}
}

// checkRules compiles the rules of a new subscription and returns them
// stamped and sorted; none gives the $Default rule.
func checkRules(rules []*pb.Rule, now int64) ([]*pb.Rule, error) {
	if len(rules) == 0 {
		rules = []*pb.Rule{DefaultRule()}
	}
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%w: %d rules, at most %d", ErrInvalidRule, len(rules), MaxRules)
	}
	out := make([]*pb.Rule, 0, len(rules))
	seen := map[string]bool{}
	for _, r := range rules {
		if _, _, err := CompileRule(r); err != nil {
			return nil, err
		}
		if seen[Key(r.Name)] {
			return nil, fmt.Errorf("%w: %q twice", ErrRuleNameTaken, r.Name)
		}
		seen[Key(r.Name)] = true
		c := proto.Clone(r).(*pb.Rule)
		c.CreatedAtMs = now
		out = append(out, c)
	}
	sortRules(out)
	return out, nil
}

func sortRules(rules []*pb.Rule) {
	slices.SortFunc(rules, func(a, b *pb.Rule) int { return cmp.Compare(Key(a.Name), Key(b.Name)) })
}

func (s *State) addRule(index uint64, now int64, c *pb.AddRuleCommand) (*pb.Entity, error) {
	e, err := s.subscription(c.Subscription)
	if err != nil {
		return nil, err
	}
	if c.Rule == nil {
		return nil, fmt.Errorf("%w: no rule", ErrInvalidRule)
	}
	if _, _, err := CompileRule(c.Rule); err != nil {
		return nil, err
	}
	for _, r := range e.Rules {
		if Key(r.Name) == Key(c.Rule.Name) {
			return nil, fmt.Errorf("%w: %q on %q", ErrRuleNameTaken, c.Rule.Name, e.Name)
		}
	}
	if len(e.Rules) >= MaxRules {
		return nil, fmt.Errorf("%w: %q has %d rules, the limit", ErrInvalidRule, e.Name, MaxRules)
	}
	r := proto.Clone(c.Rule).(*pb.Rule)
	r.CreatedAtMs = now
	e = s.mutable(e)
	e.Rules = append(e.Rules, r)
	sortRules(e.Rules)
	e.UpdatedAtMs = now
	s.setTasks(e, pb.TaskKind_TASK_KIND_UPSERT, index)
	return e, nil // the record: Apply hands out a copy (outward)
}

// replaceRule puts c.Rule in place of the rule of its name (in any case;
// the name stays as it was), in one command: the partitions get the subscription's new rule set in one
// configuration, so no message meets it without the rule or with both.
func (s *State) replaceRule(index uint64, now int64, c *pb.ReplaceRuleCommand) (*pb.Entity, error) {
	e, err := s.subscription(c.Subscription)
	if err != nil {
		return nil, err
	}
	if c.Rule == nil {
		return nil, fmt.Errorf("%w: no rule", ErrInvalidRule)
	}
	i := slices.IndexFunc(e.Rules, func(r *pb.Rule) bool { return Key(r.Name) == Key(c.Rule.Name) })
	if i < 0 {
		return nil, fmt.Errorf("%w: %q on %q", ErrRuleNotFound, c.Rule.Name, e.Name)
	}
	if _, _, err := CompileRule(c.Rule); err != nil {
		return nil, err
	}
	r := proto.Clone(c.Rule).(*pb.Rule)
	r.Name, r.CreatedAtMs = e.Rules[i].Name, e.Rules[i].CreatedAtMs // an update renames nothing
	e = s.mutable(e)
	e.Rules[i] = r
	e.UpdatedAtMs = now
	s.setTasks(e, pb.TaskKind_TASK_KIND_UPSERT, index)
	return e, nil // the record: Apply hands out a copy (outward)
}

func (s *State) removeRule(index uint64, now int64, c *pb.RemoveRuleCommand) (*pb.Entity, error) {
	e, err := s.subscription(c.Subscription)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(e.Rules, func(r *pb.Rule) bool { return Key(r.Name) == Key(c.RuleName) })
	if i < 0 {
		return nil, fmt.Errorf("%w: %q on %q", ErrRuleNotFound, c.RuleName, e.Name)
	}
	e = s.mutable(e)
	e.Rules = slices.Delete(e.Rules, i, i+1)
	e.UpdatedAtMs = now
	s.setTasks(e, pb.TaskKind_TASK_KIND_UPSERT, index)
	return e, nil // the record: Apply hands out a copy (outward)
}

// subscription finds a subscription by name.
func (s *State) subscription(name string) (*pb.Entity, error) {
	e := s.byName(name)
	if e == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if e.Kind != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		return nil, fmt.Errorf("%w: %q is a %s, and only subscriptions have rules", ErrInvalidRule, name, kindName(e.Kind))
	}
	return e, nil
}
