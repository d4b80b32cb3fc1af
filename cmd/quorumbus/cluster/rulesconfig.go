package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// rulesFile is the authorization rules file of `node` and `frontend`
// (--sas-rules):
//
//	{"AuthorizationRules": [
//	  {"Name": "RootManageSharedAccessKey", "Rights": ["Listen", "Send", "Manage"],
//	   "PrimaryKey": "...", "SecondaryKey": "..."},
//	  {"Name": "orders-reader", "Entity": "orders", "Rights": ["Listen"], "PrimaryKey": "..."}]}
//
// The names follow Azure's ARM templates (rights as a list of names).
type rulesFile struct {
	AuthorizationRules []fileRule
}

type fileRule struct {
	Name         string
	Entity       string `json:",omitempty"`
	Rights       []string
	PrimaryKey   string
	SecondaryKey string `json:",omitempty"`
}

// WriteRulesConfig writes an authorization rules file (mode 0600: it holds
// keys), for tests and scripts that start `node` or `frontend` processes.
func WriteRulesConfig(path string, rules ...sas.Rule) error {
	var f rulesFile
	for _, r := range rules {
		f.AuthorizationRules = append(f.AuthorizationRules, fileRule{
			Name: r.Name, Entity: r.Entity, Rights: strings.Split(r.Rights.String(), ","),
			PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey,
		})
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o600)
}

// maxRulesFileBytes bounds the rules file: 12 rules per entity of 10,000.
const maxRulesFileBytes = 64 << 20

// LoadRulesConfig reads an authorization rules file. Errors name the rule
// and never its keys.
func LoadRulesConfig(path string) ([]sas.Rule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > maxRulesFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxRulesFileBytes)
	}
	var f rulesFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var rules []sas.Rule
	for i, r := range f.AuthorizationRules {
		rights, err := sas.ParseRights(strings.Join(r.Rights, ","))
		if err != nil {
			return nil, fmt.Errorf("%s: rule %d (%s): %w", path, i, r.Name, err)
		}
		rules = append(rules, sas.Rule{Name: r.Name, Entity: r.Entity, Rights: rights, PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey})
	}
	if _, err := sas.NewRuleset(rules...); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rules, nil
}

// SeedRules creates the rules in the catalog through any placement member,
// leaving rules that exist as they are (a key rotated through the CLI is
// not rolled back by a restart with the same file).
func SeedRules(ctx context.Context, placementAddrs []string, creds *rpcnet.Creds, rules []sas.Rule, log *slog.Logger) error {
	client, closeFn, err := DialPlacement(placementAddrs[0], creds)
	if err != nil {
		return err
	}
	defer closeFn()
	for _, r := range rules {
		req := &placementpb.PutAuthorizationRuleRequest{CreateOnly: true, Rule: &placementpb.AuthorizationRule{
			Name: r.Name, Entity: r.Entity, Rights: uint32(r.Rights), PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey,
		}}
		deadline := time.Now().Add(60 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.PutAuthorizationRule(cctx, req)
			cancel()
			if err == nil || IsAlreadyExists(err) {
				log.Info("authorization rule ready", "rule", r.String())
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("authorization rule %s: %w", r.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
