package catalog

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/sas"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

func putRule(name, entity string, rights sas.Rights, createOnly bool) *pb.CatalogCommand {
	return &pb.CatalogCommand{NowMs: 7, Op: &pb.CatalogCommand_PutAuthorizationRule{PutAuthorizationRule: &pb.PutAuthorizationRuleCommand{
		Rule:       &pb.AuthorizationRule{Name: name, Entity: entity, Rights: uint32(rights), PrimaryKey: "pk-" + name, SecondaryKey: "sk-" + name},
		CreateOnly: createOnly,
	}}}
}

func deleteRule(name, entity string) *pb.CatalogCommand {
	return &pb.CatalogCommand{NowMs: 8, Op: &pb.CatalogCommand_DeleteAuthorizationRule{DeleteAuthorizationRule: &pb.DeleteAuthorizationRuleRequest{Name: name, Entity: entity}}}
}

// TestAuthorizationRules: rules on the namespace and on entities, their
// rejections, their place in the routing table and snapshots, and their end
// with their entity.
func TestAuthorizationRules(t *testing.T) {
	a := newApplier(t, 3)
	a.must(putRule("Root", "", sas.Manage|sas.Listen|sas.Send, true))
	if res := a.apply(putRule("ROOT", "", sas.Listen, true)); !errors.Is(res.Err, ErrAuthRuleExists) {
		t.Fatalf("create-only over an existing rule: %v", res.Err)
	}
	res := a.must(putRule("root", "", sas.Listen, false)) // replaces, keeping the creation time
	if res.Rule.Rights != uint32(sas.Listen) || res.Rule.CreatedAtMs != 7 {
		t.Fatalf("replaced rule %v", res.Rule)
	}
	if res := a.apply(putRule("q-listen", "q", sas.Listen, true)); !errors.Is(res.Err, ErrNotFound) {
		t.Fatalf("rule on a missing entity: %v", res.Err)
	}
	for _, bad := range []*pb.CatalogCommand{putRule("", "", sas.Listen, false), putRule("r", "", 0, false), putRule("r", "", sas.Manage, false)} {
		if res := a.apply(bad); !errors.Is(res.Err, ErrInvalidAuthRule) {
			t.Fatalf("invalid rule: %v", res.Err)
		}
	}
	a.must(create("Q", 0))
	a.must(create("other", 0))
	a.must(putRule("q-listen", "q", sas.Listen, true))
	a.must(putRule("root", "other", sas.Send, true)) // the same name on another scope
	for i := 1; i < MaxRulesPerScope; i++ {
		a.must(putRule(fmt.Sprintf("q-%d", i), "Q", sas.Send, true))
	}
	lastPut := a.index
	if res := a.apply(putRule("one-too-many", "q", sas.Send, true)); !errors.Is(res.Err, ErrTooManyAuthRules) {
		t.Fatalf("rule %d on an entity: %v", MaxRulesPerScope+1, res.Err)
	}
	if got := len(a.s.AuthorizationRules("q", false)); got != MaxRulesPerScope {
		t.Fatalf("%d rules on q", got)
	}
	if r := a.s.AuthorizationRules("Q", false)[0]; r.Entity != "Q" {
		t.Fatalf("rule stored on %q, want the entity's own spelling", r.Entity)
	}
	table := a.s.Table()
	if len(table.AuthorizationRules) != MaxRulesPerScope+2 || table.Version != lastPut {
		t.Fatalf("routing table has %d rules at version %d", len(table.AuthorizationRules), table.Version)
	}
	// Snapshots keep them.
	back, err := FromSnapshot(a.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back.Snapshot(), a.s.Snapshot()) {
		t.Fatal("snapshot round trip changed the rules")
	}
	a.must(deleteRule("ROOT", ""))
	if res := a.apply(deleteRule("root", "")); !errors.Is(res.Err, ErrAuthRuleNotFound) {
		t.Fatalf("delete a missing rule: %v", res.Err)
	}
	// Deleting an entity takes its rules; a new entity of that name starts
	// with none.
	a.must(wrap(&pb.DeleteEntityCommand{Name: "q"}))
	a.must(create("q", 0))
	if got := a.s.AuthorizationRules("", true); len(got) != 1 || got[0].Entity != "other" {
		t.Fatalf("rules after deleting q: %v", got)
	}
	// A snapshot with a rule on a missing entity is corrupt.
	snap := a.s.Snapshot()
	snap.AuthorizationRules = append(snap.AuthorizationRules, &pb.AuthorizationRule{Name: "x", Entity: "gone", Rights: 1, PrimaryKey: "k"})
	if _, err := FromSnapshot(snap); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("snapshot with a dangling rule: %v", err)
	}
}
