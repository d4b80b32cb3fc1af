package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/placement/sas"
)

func TestLoadRulesConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "rules.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules, err := LoadRulesConfig(write(`{"AuthorizationRules": [
		{"Name": "root", "Rights": ["Listen", "Send", "Manage"], "PrimaryKey": "pk", "SecondaryKey": "sk"},
		{"Name": "reader", "Entity": "orders", "Rights": ["listen"], "PrimaryKey": "rk"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Rights != sas.Listen|sas.Send|sas.Manage || rules[1].Entity != "orders" || rules[1].Rights != sas.Listen {
		t.Fatalf("rules %+v", rules)
	}
	for _, bad := range []string{
		`{"AuthorizationRules": [{"Name": "r", "Rights": ["Read"], "PrimaryKey": "secret-key"}]}`,
		`{"AuthorizationRules": [{"Name": "r", "Rights": ["Listen"]}]}`,
		`{"AuthorizationRules": [{"Name": "r", "Rights": ["Manage"], "PrimaryKey": "secret-key"}]}`,
		`{"AuthorizationRules": [{"Name": "r", "Rights": ["Listen"], "PrimaryKey": "secret-key"}, {"Name": "R", "Rights": ["Send"], "PrimaryKey": "secret-key"}]}`,
		`{"Rules": []}`,
		`not json`,
	} {
		_, err := LoadRulesConfig(write(bad))
		if err == nil {
			t.Errorf("%s loads", bad)
		} else if strings.Contains(err.Error(), "secret-key") {
			t.Errorf("error %q shows a key", err)
		}
	}
}
