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
	p := filepath.Join(dir, "written.json")
	if err := WriteRulesConfig(p, sas.DevRule(), rules[1]); err != nil {
		t.Fatal(err)
	}
	back, err := LoadRulesConfig(p)
	if err != nil || len(back) != 2 || back[0] != sas.DevRule() || back[1] != rules[1] {
		t.Fatalf("written and read back: %+v, %v", back, err)
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
