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

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// entityCommand is what the topic, subscription and rule commands share:
// a verb, positional names before or after the flags, and a placement
// client.
type entityCommand struct {
	fs    *flag.FlagSet
	pf    placementFlags
	verb  string
	names []string
}

func newEntityCommand(what string, args []string, usage string) (*entityCommand, []string, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, nil, errors.New("usage: quorumbus " + usage)
	}
	c := &entityCommand{verb: args[0], fs: flag.NewFlagSet(what+" "+args[0], flag.ContinueOnError)}
	c.pf.register(c.fs)
	args = args[1:]
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.names, args = append(c.names, args[0]), args[1:]
	}
	return c, args, nil
}

// parse parses the flags and takes names given after them too; want is
// how many names the verb needs.
func (c *entityCommand) parse(args []string, want int, usage string) error {
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	c.names = append(c.names, c.fs.Args()...)
	if len(c.names) != want {
		return fmt.Errorf("usage: quorumbus %s", usage)
	}
	return nil
}

func (c *entityCommand) run(fn func(ctx context.Context, client placementpb.PlacementServiceClient) error) error {
	client, closeFn, err := c.pf.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return fn(ctx, client)
}

// createEntity creates an entity, waiting for the meta group while it
// elects right after a cluster starts.
func createEntity(ctx context.Context, client placementpb.PlacementServiceClient, req *placementpb.CreateEntityRequest) (*placementpb.Entity, error) {
	for {
		e, err := client.CreateEntity(ctx, req)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return e, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// topicCmd manages topics through the placement service, until the HTTP
// gateway exists.
func topicCmd(args []string) error {
	const usage = "topic create|list|get|delete [flags] [NAME]"
	c, args, err := newEntityCommand("topic", args, usage)
	if err != nil {
		return err
	}
	var d placementpb.TopicDescription
	fs := c.fs
	fs.DurationVar(&d.DefaultMessageTimeToLive, "default-ttl", 0, "DefaultMessageTimeToLive (default: none)")
	fs.BoolVar(&d.RequiresDuplicateDetection, "duplicate-detection", false, "RequiresDuplicateDetection")
	fs.DurationVar(&d.DuplicateDetectionHistoryTimeWindow, "duplicate-detection-window", 0, "DuplicateDetectionHistoryTimeWindow (default 10m)")
	fs.Func("partitions", "PartitionCount (0: not partitioned)", uint32Flag(&d.PartitionCount))
	fs.BoolVar(&d.EnablePartitioning, "enable-partitioning", false, "EnablePartitioning: 16 partitions unless -partitions says otherwise")
	fs.Int64Var(&d.MaxMessageSizeInKilobytes, "max-message-size-kb", 0, "MaxMessageSizeInKilobytes (default 256)")
	fs.Int64Var(&d.MaxSizeInMegabytes, "max-size-mb", 0, "MaxSizeInMegabytes (default 1024)")
	want := 1
	if c.verb == "list" {
		want = 0
	}
	if err := c.parse(args, want, usage); err != nil {
		return err
	}
	return c.run(func(ctx context.Context, client placementpb.PlacementServiceClient) error {
		switch c.verb {
		case "create":
			e, err := createEntity(ctx, client, &placementpb.CreateEntityRequest{
				Name: c.names[0], Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Properties: d.Properties()})
			if err != nil {
				return err
			}
			printTopics([]*placementpb.Entity{e})
		case "get":
			e, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: c.names[0]})
			if err != nil {
				return err
			}
			if e.Kind != placementpb.EntityKind_ENTITY_KIND_TOPIC {
				return fmt.Errorf("%s is not a topic", c.names[0])
			}
			printTopics([]*placementpb.Entity{e})
		case "list":
			resp, err := client.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC})
			if err != nil {
				return err
			}
			printTopics(resp.Entities)
		case "delete":
			if _, err := client.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: c.names[0]}); err != nil {
				return err
			}
			fmt.Println("deleted", c.names[0], "and its subscriptions")
		default:
			return fmt.Errorf("unknown topic command %q", c.verb)
		}
		return nil
	})
}

func printTopics(es []*placementpb.Entity) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tID\tSTATUS\tPARTITIONS\tGROUPS\tDEFAULT-TTL\tDUPLICATE-DETECTION")
	for _, e := range es {
		p := e.GetProperties()
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%v\t%v\t%v\n", e.Name, e.Id, strings.TrimPrefix(e.Status.String(), "ENTITY_STATUS_"),
			len(e.PartitionGroups), e.PartitionGroups, time.Duration(p.GetDefaultMessageTtlMs())*time.Millisecond, p.GetRequiresDuplicateDetection())
	}
	w.Flush()
}

// ruleFlags declares the flags that describe one rule.
type ruleFlags struct {
	name        *string
	sql, action *string
	trueF       *bool
	falseF      *bool
	corr        placementpb.CorrelationDescription
}

func addRuleFlags(fs *flag.FlagSet, defaultName string) *ruleFlags {
	r := &ruleFlags{}
	if defaultName != "" {
		r.name = fs.String("rule-name", defaultName, "name of the rule to create with the subscription")
	}
	r.sql = fs.String("sql", "", "SQL filter expression, e.g. \"color = 'red' AND quantity > 5\"")
	r.action = fs.String("action", "", "SQL action, e.g. \"SET sys.Label = 'red'; REMOVE quantity\"")
	r.trueF = fs.Bool("true", false, "a true filter (matches every message)")
	r.falseF = fs.Bool("false", false, "a false filter (matches none)")
	fs.StringVar(&r.corr.CorrelationID, "correlation-id", "", "correlation filter: CorrelationId")
	fs.StringVar(&r.corr.MessageID, "message-id", "", "correlation filter: MessageId")
	fs.StringVar(&r.corr.To, "to", "", "correlation filter: To")
	fs.StringVar(&r.corr.ReplyTo, "reply-to", "", "correlation filter: ReplyTo")
	fs.StringVar(&r.corr.Subject, "subject", "", "correlation filter: Subject (Label)")
	fs.StringVar(&r.corr.SessionID, "session-id", "", "correlation filter: SessionId")
	fs.StringVar(&r.corr.ReplyToSessionID, "reply-to-session-id", "", "correlation filter: ReplyToSessionId")
	fs.StringVar(&r.corr.ContentType, "content-type", "", "correlation filter: ContentType")
	fs.Func("property", "correlation filter: an application property NAME=VALUE (a string; repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not NAME=VALUE", s)
		}
		if r.corr.Properties == nil {
			r.corr.Properties = map[string]any{}
		}
		r.corr.Properties[k] = v
		return nil
	})
	return r
}

// given reports whether any filter flag was set.
func (r *ruleFlags) given() bool {
	return *r.sql != "" || *r.trueF || *r.falseF || r.correlationGiven()
}

func (r *ruleFlags) correlationGiven() bool {
	c := r.corr
	return c.CorrelationID+c.MessageID+c.To+c.ReplyTo+c.Subject+c.SessionID+c.ReplyToSessionID+c.ContentType != "" || len(c.Properties) > 0
}

// rule builds the rule the flags describe; exactly one kind of filter.
func (r *ruleFlags) rule(name string) (*placementpb.Rule, error) {
	d := placementpb.RuleDescription{Name: name, SqlExpression: *r.sql, Correlation: r.corr, ActionExpression: *r.action}
	kinds := 0
	if *r.sql != "" {
		d.FilterType, kinds = "Sql", kinds+1
	}
	if *r.trueF {
		d.FilterType, kinds = "True", kinds+1
	}
	if *r.falseF {
		d.FilterType, kinds = "False", kinds+1
	}
	if r.correlationGiven() {
		d.FilterType, kinds = "Correlation", kinds+1
	}
	if kinds != 1 {
		return nil, errors.New("give one filter: -sql, -true, -false, or correlation flags (-correlation-id, -subject, -property, ...)")
	}
	return d.Rule()
}

// subscriptionCmd manages a topic's subscriptions.
func subscriptionCmd(args []string) error {
	const usage = "subscription create|get|delete|purge|redrive [flags] TOPIC NAME, or subscription list TOPIC"
	if len(args) > 0 && (args[0] == "purge" || args[0] == "redrive") {
		return messagesCmd("subscription", args[0], args[1:])
	}
	c, args, err := newEntityCommand("subscription", args, usage)
	if err != nil {
		return err
	}
	var d placementpb.SubscriptionDescription
	fs := c.fs
	fs.DurationVar(&d.LockDuration, "lock-duration", 0, "LockDuration (default 1m, max 5m)")
	fs.Func("max-delivery-count", "MaxDeliveryCount (default 10)", uint32Flag(&d.MaxDeliveryCount))
	fs.DurationVar(&d.DefaultMessageTimeToLive, "default-ttl", 0, "DefaultMessageTimeToLive (default: the topic's)")
	fs.BoolVar(&d.DeadLetteringOnMessageExpiration, "dead-letter-on-expiration", false, "DeadLetteringOnMessageExpiration")
	dlFilter := fs.Bool("dead-letter-on-filter-exceptions", true, "DeadLetteringOnFilterEvaluationExceptions: dead-letter a copy whose rule cannot be evaluated")
	fs.BoolVar(&d.RequiresSession, "requires-session", false, "RequiresSession")
	fs.DurationVar(&d.SessionAcceptWait, "session-accept-wait", 0, sessionAcceptWaitPropertyUsage)
	fs.StringVar(&d.ForwardTo, "forward-to", "", "ForwardTo")
	fs.StringVar(&d.ForwardDeadLetteredMessagesTo, "forward-dead-lettered-to", "", "ForwardDeadLetteredMessagesTo")
	rf := addRuleFlags(fs, "$Default")
	want := 2
	if c.verb == "list" {
		want = 1
	}
	if err := c.parse(args, want, usage); err != nil {
		return err
	}
	d.DeadLetteringOnFilterEvaluationExceptions = dlFilter
	return c.run(func(ctx context.Context, client placementpb.PlacementServiceClient) error {
		switch c.verb {
		case "create":
			req := &placementpb.CreateEntityRequest{Name: c.names[0] + "/Subscriptions/" + c.names[1],
				Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Properties: d.Properties()}
			if rf.given() {
				r, err := rf.rule(*rf.name)
				if err != nil {
					return err
				}
				req.Rules = []*placementpb.Rule{r}
			} else if *rf.action != "" {
				return errors.New("-action needs a filter (-sql, -true, ...)")
			}
			e, err := createEntity(ctx, client, req)
			if err != nil {
				return err
			}
			printSubscriptions([]*placementpb.Entity{e})
		case "get":
			e, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: c.names[0] + "/Subscriptions/" + c.names[1]})
			if err != nil {
				return err
			}
			printSubscriptions([]*placementpb.Entity{e})
		case "list":
			resp, err := client.ListEntities(ctx, &placementpb.ListEntitiesRequest{Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
			if err != nil {
				return err
			}
			prefix := strings.ToLower(c.names[0] + "/Subscriptions/")
			var subs []*placementpb.Entity
			for _, e := range resp.Entities {
				if rest, ok := strings.CutPrefix(strings.ToLower(e.Name), prefix); ok && !strings.Contains(rest, "/") {
					subs = append(subs, e)
				}
			}
			printSubscriptions(subs)
		case "delete":
			name := c.names[0] + "/Subscriptions/" + c.names[1]
			if _, err := client.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: name}); err != nil {
				return err
			}
			fmt.Println("deleted", name)
		default:
			return fmt.Errorf("unknown subscription command %q", c.verb)
		}
		return nil
	})
}

func printSubscriptions(es []*placementpb.Entity) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tID\tSTATUS\tPARTITIONS\tLOCK\tMAX-DELIVERY\tSESSIONS\tRULES")
	for _, e := range es {
		p := e.GetProperties()
		var rules []string
		for _, r := range e.Rules {
			rules = append(rules, r.Name)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%v\t%d\t%v\t%s\n", e.Name, e.Id, strings.TrimPrefix(e.Status.String(), "ENTITY_STATUS_"),
			len(e.PartitionGroups), time.Duration(p.GetLockDurationMs())*time.Millisecond, p.GetMaxDeliveryCount(),
			p.GetRequiresSession(), strings.Join(rules, ","))
	}
	w.Flush()
}

// ruleCmd manages a subscription's rules.
func ruleCmd(args []string) error {
	const usage = "rule create|delete [flags] TOPIC SUBSCRIPTION NAME, or rule list TOPIC SUBSCRIPTION"
	c, args, err := newEntityCommand("rule", args, usage)
	if err != nil {
		return err
	}
	rf := addRuleFlags(c.fs, "")
	want := 3
	if c.verb == "list" {
		want = 2
	}
	if err := c.parse(args, want, usage); err != nil {
		return err
	}
	sub := c.names[0] + "/Subscriptions/" + c.names[1]
	return c.run(func(ctx context.Context, client placementpb.PlacementServiceClient) error {
		switch c.verb {
		case "create":
			r, err := rf.rule(c.names[2])
			if err != nil {
				return err
			}
			got, err := client.AddRule(ctx, &placementpb.AddRuleRequest{Subscription: sub, Rule: r})
			if err != nil {
				return err
			}
			printRules([]*placementpb.Rule{got})
		case "list":
			e, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: sub})
			if err != nil {
				return err
			}
			printRules(e.Rules)
		case "delete":
			if _, err := client.RemoveRule(ctx, &placementpb.RemoveRuleRequest{Subscription: sub, RuleName: c.names[2]}); err != nil {
				return err
			}
			fmt.Println("deleted rule", c.names[2], "of", sub)
		default:
			return fmt.Errorf("unknown rule command %q", c.verb)
		}
		return nil
	})
}

func printRules(rules []*placementpb.Rule) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tFILTER\tACTION")
	for _, r := range rules {
		var f string
		switch x := r.Filter.(type) {
		case *placementpb.Rule_SqlFilter:
			f = "sql: " + x.SqlFilter.Expression
		case *placementpb.Rule_CorrelationFilter:
			f = "correlation: " + describeCorrelation(x.CorrelationFilter)
		case *placementpb.Rule_TrueFilter:
			f = "true"
		case *placementpb.Rule_FalseFilter:
			f = "false"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Name, f, r.Action.GetExpression())
	}
	w.Flush()
}

func describeCorrelation(c *placementpb.CorrelationFilter) string {
	var parts []string
	for _, f := range []struct{ name, v string }{
		{"CorrelationId", c.CorrelationId}, {"MessageId", c.MessageId}, {"To", c.To}, {"ReplyTo", c.ReplyTo},
		{"Subject", c.Subject}, {"SessionId", c.SessionId}, {"ReplyToSessionId", c.ReplyToSessionId}, {"ContentType", c.ContentType},
	} {
		if f.v != "" {
			parts = append(parts, f.name+"="+f.v)
		}
	}
	for k, v := range c.Properties {
		parts = append(parts, k+"="+ruleValueString(v))
	}
	return strings.Join(parts, " ")
}

func ruleValueString(v *placementpb.RuleValue) string {
	switch x := v.GetValue().(type) {
	case *placementpb.RuleValue_StringValue:
		return fmt.Sprintf("%q", x.StringValue)
	case *placementpb.RuleValue_LongValue:
		return fmt.Sprint(x.LongValue)
	case *placementpb.RuleValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *placementpb.RuleValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *placementpb.RuleValue_TimestampMs:
		return time.UnixMilli(x.TimestampMs).UTC().Format(time.RFC3339Nano)
	case *placementpb.RuleValue_DurationMs:
		return (time.Duration(x.DurationMs) * time.Millisecond).String()
	}
	return "null"
}
