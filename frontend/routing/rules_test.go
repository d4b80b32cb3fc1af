package routing

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestRulesetJoinsConfigAndCatalog: the configured rules serve before any
// table arrives; each table's rules join them; a catalog rule that clashes
// with a configured one, or is unusable, is left out.
func TestRulesetJoinsConfigAndCatalog(t *testing.T) {
	r, err := New(Config{Placement: []string{"127.0.0.1:1"}, Rules: []sas.Rule{sas.DevRule()}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	valid := func(keyName, key, aud string) bool {
		_, err := r.Ruleset().Validate(sas.Sign(keyName, key, aud, now.Add(time.Hour)), "", now)
		return err == nil
	}
	if !valid(sas.DevKeyName, sas.DevKey, "sb://h/q") {
		t.Fatal("the configured rule does not serve before the first table")
	}
	r.install(&placementpb.RoutingTable{Version: 5, AuthorizationRules: []*placementpb.AuthorizationRule{
		{Name: "reader", Entity: "q", Rights: uint32(sas.Listen), PrimaryKey: "reader-key"},
		{Name: sas.DevKeyName, Rights: uint32(sas.Listen), PrimaryKey: "catalog-key"}, // clashes
		{Name: "broken", Rights: uint32(sas.Listen)},                                  // no key
	}})
	switch {
	case !valid("reader", "reader-key", "sb://h/q"):
		t.Fatal("the catalog's rule does not serve")
	case valid(sas.DevKeyName, "catalog-key", "sb://h/q"):
		t.Fatal("a catalog rule replaced the configured one of its name")
	case !valid(sas.DevKeyName, sas.DevKey, "sb://h/q"):
		t.Fatal("the configured rule stopped serving")
	case r.Ruleset().Len() != 2:
		t.Fatalf("%d rules, want 2", r.Ruleset().Len())
	}
	r.install(&placementpb.RoutingTable{Version: 6})
	if valid("reader", "reader-key", "sb://h/q") {
		t.Fatal("a rule removed from the catalog still serves")
	}
}
