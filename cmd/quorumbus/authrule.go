package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// authRuleCmd manages the Shared Access Signature rules of the catalog
// through the placement service. Keys are printed only by create,
// regenerate-keys and keys, which exist to show them.
func authRuleCmd(args []string) error {
	const usage = "usage: quorumbus auth-rule create|list|keys|regenerate-keys|delete [flags] [NAME]"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New(usage)
	}
	verb, args := args[0], args[1:]
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("auth-rule "+verb, flag.ContinueOnError)
	var pf placementFlags
	pf.register(fs)
	entity := fs.String("entity", "", "queue or topic the rule is on (default: the namespace)")
	rightsFlag := fs.String("rights", "Listen", "rights of a new rule: Listen, Send, Manage, comma-separated (Manage needs the other two)")
	primary := fs.String("primary-key", "", "primary key of a new rule (default: 32 random bytes, base64, as Azure makes them)")
	secondary := fs.String("secondary-key", "", "secondary key of a new rule (default: random)")
	which := fs.String("key", "both", "regenerate-keys: primary, secondary or both")
	endpoint := fs.String("endpoint", "", "AMQP address (host:port) for the connection strings printed with keys")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" {
		name = fs.Arg(0)
	}
	if verb != "list" && name == "" {
		return fmt.Errorf("auth-rule %s needs a rule name", verb)
	}
	client, closeFn, err := pf.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	find := func() (*placementpb.AuthorizationRule, error) {
		resp, err := client.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{Entity: *entity})
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Rules {
			if strings.EqualFold(r.Name, name) {
				return r, nil
			}
		}
		return nil, fmt.Errorf("no rule %s on %s", name, scopeName(*entity))
	}
	put := func(r *placementpb.AuthorizationRule, createOnly bool) (*placementpb.AuthorizationRule, error) {
		for {
			got, err := client.PutAuthorizationRule(ctx, &placementpb.PutAuthorizationRuleRequest{Rule: r, CreateOnly: createOnly})
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				return got, err
			}
			time.Sleep(200 * time.Millisecond) // the meta group may still be electing
		}
	}
	switch verb {
	case "create":
		rights, err := sas.ParseRights(*rightsFlag)
		if err != nil {
			return err
		}
		r := &placementpb.AuthorizationRule{Name: name, Entity: *entity, Rights: uint32(rights), PrimaryKey: *primary, SecondaryKey: *secondary}
		if r.PrimaryKey == "" {
			r.PrimaryKey = sas.NewKey()
		}
		if r.SecondaryKey == "" {
			r.SecondaryKey = sas.NewKey()
		}
		got, err := put(r, true)
		if err != nil {
			return err
		}
		printKeys(got, *endpoint)
	case "keys":
		r, err := find()
		if err != nil {
			return err
		}
		printKeys(r, *endpoint)
	case "regenerate-keys":
		r, err := find()
		if err != nil {
			return err
		}
		switch *which {
		case "primary":
			r.PrimaryKey = sas.NewKey()
		case "secondary":
			r.SecondaryKey = sas.NewKey()
		case "both":
			r.PrimaryKey, r.SecondaryKey = sas.NewKey(), sas.NewKey()
		default:
			return fmt.Errorf("-key %q: want primary, secondary or both", *which)
		}
		got, err := put(r, false)
		if err != nil {
			return err
		}
		printKeys(got, *endpoint)
	case "list":
		resp, err := client.ListAuthorizationRules(ctx, &placementpb.ListAuthorizationRulesRequest{Entity: *entity, AllScopes: *entity == ""})
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tSCOPE\tRIGHTS\tCREATED\tUPDATED")
		for _, r := range resp.Rules {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Name, scopeName(r.Entity), sas.Rights(r.Rights),
				time.UnixMilli(r.CreatedAtMs).UTC().Format(time.RFC3339), time.UnixMilli(r.UpdatedAtMs).UTC().Format(time.RFC3339))
		}
		w.Flush()
	case "delete":
		if _, err := client.DeleteAuthorizationRule(ctx, &placementpb.DeleteAuthorizationRuleRequest{Name: name, Entity: *entity}); err != nil {
			return err
		}
		fmt.Println("deleted", name, "on", scopeName(*entity))
	default:
		return fmt.Errorf("unknown auth-rule command %q; %s", verb, usage)
	}
	return nil
}

func scopeName(entity string) string {
	if entity == "" {
		return "the namespace"
	}
	return entity
}

func printKeys(r *placementpb.AuthorizationRule, endpoint string) {
	fmt.Printf("rule %s on %s: %s\n", r.Name, scopeName(r.Entity), sas.Rights(r.Rights))
	fmt.Printf("PrimaryKey:   %s\nSecondaryKey: %s\n", r.PrimaryKey, r.SecondaryKey)
	if endpoint != "" {
		cs := cluster.RuleConnectionString(endpoint, r.Name, r.PrimaryKey)
		if r.Entity != "" {
			cs += ";EntityPath=" + r.Entity
		}
		fmt.Println(cs)
	}
}
