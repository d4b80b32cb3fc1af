package catalog

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of transcript tests")

// TestTranscripts runs testdata/*.txt. A transcript is a list of blocks
// separated by blank lines: one command line, a line "----", then the
// output the command must give. Lines starting with '#' are comments.
// Run with -rewrite to regenerate the expected output after a deliberate
// change, then read the diff.
//
// Commands (each catalog command gets the next log index, from 1):
//
//	time MS                          the leader time stamped on later commands
//	nodes ID:ZONE[:down] ...         RegisterNodes
//	groups EXPECT REPLICAS ...       CreateGroups, REPLICAS is n1,n2,n3
//	create NAME [k=v|flag ...]       CreateEntity (see props)
//	update NAME [k=v|flag ...]       UpdateEntity; "keep" sends no properties
//	delete NAME                      DeleteEntity
//	addrule SUB NAME FILTER...       AddRule; replacerule the same, ReplaceRule
//	report G:LEADER:QUORUM ...       ReportGroups, QUORUM is y or n
//	complete all | E/P@V:KIND ...    CompleteTasks
//	get NAME | list [kind=K skip=N top=N] | subs TOPIC [skip=N top=N]
//	tasks | loads | state
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runTranscript(t, file) })
	}
}

func runTranscript(t *testing.T, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := &transcript{s: New()}
	var out strings.Builder
	blocks := strings.Split(strings.TrimRight(string(raw), "\n"), "\n\n")
	for i, block := range blocks {
		if i > 0 {
			out.WriteString("\n")
		}
		lines := strings.Split(block, "\n")
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			out.WriteString(lines[0] + "\n")
			lines = lines[1:]
		}
		if len(lines) == 0 { // a comment-only block
			continue
		}
		if len(lines) < 2 || lines[1] != "----" {
			t.Fatalf("%s: block %d: %q is not followed by ----", file, i+1, lines[0])
		}
		cmd, want := lines[0], lines[2:]
		got := r.run(cmd)
		if err := checkIndex(r.s); err != nil {
			t.Fatalf("%s: after %s: %v", file, cmd, err)
		}
		fmt.Fprintf(&out, "%s\n----\n%s\n", cmd, got)
		if w := strings.Join(want, "\n"); w != got && !*rewrite {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", file, cmd, got, w)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type transcript struct {
	s     *State
	index uint64
	now   int64
}

func (r *transcript) apply(op proto.Message) (Result, string) {
	cmd := wrap(op)
	cmd.NowMs = r.now
	r.index++
	res, err := r.s.Apply(r.index, cmd)
	if err != nil {
		return res, fmt.Sprintf("@%d fatal: %v", r.index, err)
	}
	if res.Err != nil {
		return res, fmt.Sprintf("@%d rejected: %v", r.index, res.Err)
	}
	return res, fmt.Sprintf("@%d ok", r.index)
}

func (r *transcript) run(line string) string {
	f := strings.Fields(line)
	args := f[1:]
	switch f[0] {
	case "time":
		r.now, _ = strconv.ParseInt(args[0], 10, 64)
		return fmt.Sprintf("now %d", r.now)
	case "nodes":
		c := &pb.RegisterNodes{}
		for _, a := range args {
			p := strings.Split(a, ":")
			c.Nodes = append(c.Nodes, &pb.Node{Id: p[0], Zone: p[1], GrpcAddr: p[0] + ":7000", Alive: len(p) < 3})
		}
		_, s := r.apply(c)
		return s
	case "groups":
		expect, _ := strconv.ParseUint(args[0], 10, 64)
		c := &pb.CreateGroups{ExpectedGroups: expect}
		for _, a := range args[1:] {
			g := &pb.NewGroup{}
			for _, n := range strings.Split(a, ",") {
				g.Replicas = append(g.Replicas, &pb.Replica{NodeId: n})
			}
			c.Groups = append(c.Groups, g)
		}
		res, s := r.apply(c)
		if res.Err == nil && len(res.Groups) > 0 {
			s += fmt.Sprintf(" ids=%v", res.Groups)
		}
		return s
	case "create":
		c := &pb.CreateEntityCommand{Name: args[0], Properties: &pb.QueueProperties{}}
		groupsGiven := false
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "kind":
				c.Kind = parseKind(v)
			case "status":
				c.Status = parseStatus(v)
			case "groups":
				groupsGiven = true
				for _, g := range strings.Split(v, ",") {
					id, _ := strconv.ParseUint(g, 10, 64)
					c.PartitionGroups = append(c.PartitionGroups, id)
				}
			default:
				setProp(c.Properties, k, v)
			}
		}
		if topicName, _, ok := SplitSubscriptionName(c.Name); ok && !groupsGiven && c.Kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
			// As the service does: a subscription lives on its topic's groups.
			if topic := r.s.Entity(topicName); topic != nil {
				c.PartitionGroups = topic.PartitionGroups
				c.Properties.PartitionCount = topic.Properties.PartitionCount
			}
		} else if !groupsGiven { // round-robin over the groups, as a stand-in for the planner
			n, err := Normalize(c.Properties)
			groups := r.s.Groups()
			if err == nil && len(groups) > 0 {
				for i := range int(n.PartitionCount) {
					c.PartitionGroups = append(c.PartitionGroups, groups[i%len(groups)].Id)
				}
			}
		}
		res, s := r.apply(c)
		if res.Entity != nil {
			s += "\n" + render(res.Entity)
		}
		return s
	case "update":
		c := &pb.UpdateEntityCommand{Name: args[0], Properties: &pb.QueueProperties{}}
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "keep":
				c.Properties = nil
			case "status":
				c.Status = parseStatus(v)
			default:
				setProp(c.Properties, k, v)
			}
		}
		res, s := r.apply(c)
		if res.Entity != nil {
			s += "\n" + render(res.Entity)
		}
		return s
	case "delete":
		_, s := r.apply(&pb.DeleteEntityCommand{Name: args[0]})
		return s
	case "addrule":
		res, s := r.apply(&pb.AddRuleCommand{Subscription: args[0], Rule: parseRule(args[1], strings.Join(args[2:], " "))})
		if res.Entity != nil {
			s += "\n" + render(res.Entity)
		}
		return s
	case "replacerule":
		res, s := r.apply(&pb.ReplaceRuleCommand{Subscription: args[0], Rule: parseRule(args[1], strings.Join(args[2:], " "))})
		if res.Entity != nil {
			s += "\n" + render(res.Entity)
		}
		return s
	case "removerule":
		res, s := r.apply(&pb.RemoveRuleCommand{Subscription: args[0], RuleName: args[1]})
		if res.Entity != nil {
			s += "\n" + render(res.Entity)
		}
		return s
	case "subs":
		skip, top := pagingArgs(args[1:])
		subs, ok := r.s.Subscriptions(args[0], skip, top)
		if !ok {
			return "no topic"
		}
		var names []string
		for _, e := range subs {
			names = append(names, e.Name)
		}
		return fmt.Sprintf("%v", names)
	case "report":
		c := &pb.ReportGroupsRequest{NodeId: "test"}
		for _, a := range args {
			p := strings.Split(a, ":")
			id, _ := strconv.ParseUint(p[0], 10, 64)
			c.Groups = append(c.Groups, &pb.GroupReport{GroupId: id, LeaderId: p[1], HasQuorum: p[2] == "y"})
		}
		_, s := r.apply(c)
		return s
	case "complete":
		c := &pb.CompleteTasks{}
		if len(args) == 1 && args[0] == "all" {
			c.Tasks = r.s.Tasks()
		}
		for _, a := range args {
			if a == "all" {
				continue
			}
			var e, v uint64
			var p uint32
			var kind string
			fmt.Sscanf(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(a, "/", " "), "@", " "), ":", " "), "%d %d %d %s", &e, &p, &v, &kind)
			c.Tasks = append(c.Tasks, &pb.PartitionTask{EntityId: e, Partition: p, Version: v,
				Kind: pb.TaskKind(pb.TaskKind_value["TASK_KIND_"+strings.ToUpper(kind)])})
		}
		_, s := r.apply(c)
		return s
	case "get":
		e := r.s.Entity(args[0])
		if e == nil {
			return "not found"
		}
		return render(e)
	case "list":
		kind := pb.EntityKind_ENTITY_KIND_QUEUE
		for _, a := range args {
			if k, v, _ := strings.Cut(a, "="); k == "kind" {
				kind = pb.EntityKind(pb.EntityKind_value["ENTITY_KIND_"+strings.ToUpper(v)])
			}
		}
		skip, top := pagingArgs(args)
		var names []string
		for _, e := range r.s.Entities(kind, skip, top) {
			names = append(names, e.Name)
		}
		return fmt.Sprintf("%v", names)
	case "tasks":
		var lines []string
		for _, t := range r.s.Tasks() {
			lines = append(lines, fmt.Sprintf("%d/%d@%d:%s group=%d", t.EntityId, t.Partition, t.Version,
				strings.ToLower(strings.TrimPrefix(t.Kind.String(), "TASK_KIND_")), t.GroupId))
		}
		if len(lines) == 0 {
			return "no tasks"
		}
		return strings.Join(lines, "\n")
	case "loads":
		var parts []string
		for _, g := range r.s.Groups() {
			parts = append(parts, fmt.Sprintf("%d:%d", g.Id, r.s.GroupLoads()[g.Id]))
		}
		return strings.Join(parts, " ")
	case "state":
		t := r.s.Table()
		var groups, nodes []string
		for _, g := range t.Groups {
			var reps []string
			for _, rep := range g.Replicas {
				reps = append(reps, rep.NodeId)
			}
			groups = append(groups, fmt.Sprintf("%d=[%s] leader=%q quorum=%v", g.Id, strings.Join(reps, " "), g.LeaderId, g.HasQuorum))
		}
		for _, n := range t.Nodes {
			nodes = append(nodes, fmt.Sprintf("%s/%s alive=%v", n.Id, n.Zone, n.Alive))
		}
		return fmt.Sprintf("applied=%d modified=%d routes=%d entities=%d partitioned=%d next-entity=%d\ngroups: %s\nnodes: %s",
			r.s.Applied(), r.s.Modified(), t.Version, r.s.Len(), r.s.partitioned, r.s.nextEntityID,
			strings.Join(groups, "; "), strings.Join(nodes, "; "))
	}
	return "unknown command " + f[0]
}

// pagingArgs reads skip=N and top=N among a command's arguments.
func pagingArgs(args []string) (skip, top int) {
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "skip":
			skip = n
		case "top":
			top = n
		}
	}
	return skip, top
}

func parseKind(v string) pb.EntityKind {
	if n, err := strconv.Atoi(v); err == nil {
		return pb.EntityKind(n)
	}
	return pb.EntityKind(pb.EntityKind_value["ENTITY_KIND_"+strings.ToUpper(v)])
}

func parseStatus(v string) pb.EntityStatus {
	if n, err := strconv.Atoi(v); err == nil {
		return pb.EntityStatus(n)
	}
	return pb.EntityStatus(pb.EntityStatus_value["ENTITY_STATUS_"+strings.ToUpper(strings.ReplaceAll(v, "-", "_"))])
}

func setProp(p *pb.QueueProperties, k, v string) {
	n, _ := strconv.ParseInt(v, 10, 64)
	switch k {
	case "lock":
		p.LockDurationMs = n
	case "maxdelivery":
		p.MaxDeliveryCount = uint32(n)
	case "ttl":
		p.DefaultMessageTtlMs = n
	case "deadletter-expired":
		p.DeadLetteringOnMessageExpiration = true
	case "dup":
		p.RequiresDuplicateDetection = true
	case "dupwindow":
		p.DuplicateDetectionWindowMs = n
	case "session":
		p.RequiresSession = true
	case "size":
		p.MaxSizeInMegabytes = n
	case "msgsize":
		p.MaxMessageSizeInKilobytes = n
	case "partitions":
		p.PartitionCount = uint32(n)
	case "partitioned":
		p.EnablePartitioning = true
	case "forward":
		p.ForwardTo = v
	case "forward-dlq":
		p.ForwardDeadLetteredMessagesTo = v
	case "deadletter-filter":
		p.DeadLetteringOnFilterEvaluationExceptions = proto.Bool(v != "no")
	default:
		panic("unknown property " + k)
	}
}

// render prints an entity on one line, properties that differ from the
// defaults only.
func render(e *pb.Entity) string {
	p := e.Properties
	var b strings.Builder
	fmt.Fprintf(&b, "entity %d %q %s %s groups=%v lock=%d maxdelivery=%d", e.Id, e.Name,
		strings.ToLower(strings.TrimPrefix(e.Kind.String(), "ENTITY_KIND_")),
		strings.ToLower(strings.TrimPrefix(e.Status.String(), "ENTITY_STATUS_")),
		e.PartitionGroups, p.LockDurationMs, p.MaxDeliveryCount)
	if p.EnablePartitioning {
		fmt.Fprintf(&b, " partitioned=%d", p.PartitionCount)
	}
	if p.DefaultMessageTtlMs != 0 {
		fmt.Fprintf(&b, " ttl=%d", p.DefaultMessageTtlMs)
	}
	if p.DeadLetteringOnMessageExpiration {
		b.WriteString(" deadletter-expired")
	}
	if p.RequiresSession {
		b.WriteString(" session")
	}
	if p.RequiresDuplicateDetection {
		fmt.Fprintf(&b, " dup=%d", p.DuplicateDetectionWindowMs)
	}
	if p.MaxSizeInMegabytes != DefaultMaxSizeMB {
		fmt.Fprintf(&b, " size=%d", p.MaxSizeInMegabytes)
	}
	if p.ForwardTo != "" {
		fmt.Fprintf(&b, " forward=%s", p.ForwardTo)
	}
	if e.Kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION && !p.GetDeadLetteringOnFilterEvaluationExceptions() {
		b.WriteString(" deadletter-filter=no") // true is a subscription's default
	}
	fmt.Fprintf(&b, " created=%d updated=%d", e.CreatedAtMs, e.UpdatedAtMs)
	for _, r := range e.Rules {
		fmt.Fprintf(&b, "\n  rule %s %s", r.Name, renderFilter(r))
		if r.Action != nil {
			fmt.Fprintf(&b, " => %s", r.Action.Expression)
		}
		fmt.Fprintf(&b, " created=%d", r.CreatedAtMs)
	}
	return b.String()
}

func renderFilter(r *pb.Rule) string {
	switch f := r.Filter.(type) {
	case *pb.Rule_SqlFilter:
		return "sql " + f.SqlFilter.Expression
	case *pb.Rule_CorrelationFilter:
		return "correlation " + prototextLine(f.CorrelationFilter)
	case *pb.Rule_TrueFilter:
		return "true"
	case *pb.Rule_FalseFilter:
		return "false"
	}
	return "none"
}

func prototextLine(m proto.Message) string {
	return strings.Join(strings.Fields(prototext.Format(m)), " ")
}

// parseRule reads "NAME KIND [BODY] [=> ACTION]": KIND is sql (BODY the
// expression), correlation (BODY key=value ..., sys fields by their
// proto names, user properties as user.NAME=VALUE with strings), true,
// false or none.
func parseRule(name, rest string) *pb.Rule {
	r := &pb.Rule{Name: name}
	body, action, hasAction := strings.Cut(rest, " => ")
	if hasAction {
		r.Action = &pb.SqlRuleAction{Expression: action}
	}
	kind, body, _ := strings.Cut(body, " ")
	switch kind {
	case "sql":
		r.Filter = &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: body}}
	case "true":
		r.Filter = &pb.Rule_TrueFilter{TrueFilter: true}
	case "false":
		r.Filter = &pb.Rule_FalseFilter{FalseFilter: true}
	case "correlation":
		c := &pb.CorrelationFilter{}
		for _, kv := range strings.Fields(body) {
			k, v, _ := strings.Cut(kv, "=")
			switch {
			case k == "correlation_id":
				c.CorrelationId = v
			case k == "subject":
				c.Subject = v
			case k == "to":
				c.To = v
			case strings.HasPrefix(k, "user."):
				if c.Properties == nil {
					c.Properties = map[string]*pb.RuleValue{}
				}
				c.Properties[k[5:]] = &pb.RuleValue{Value: &pb.RuleValue_StringValue{StringValue: v}}
			}
		}
		r.Filter = &pb.Rule_CorrelationFilter{CorrelationFilter: c}
	}
	return r
}
