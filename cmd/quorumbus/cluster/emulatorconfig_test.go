package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

func TestLoadEmulatorConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Config.json")
	os.WriteFile(path, []byte(`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
		{"Name": "queue.1", "Properties": {"DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT1H",
		 "DuplicateDetectionHistoryTimeWindow": "PT20S", "LockDuration": "PT30S", "MaxDeliveryCount": 3,
		 "RequiresDuplicateDetection": true, "RequiresSession": false}},
		{"Name": "queue.2", "Properties": {"RequiresSession": true, "SessionAcceptWait": "PT2.5S"}}]}], "Logging": {"Type": "File"}}}`), 0o644)
	qs, err := LoadEmulatorConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "queue.1" || qs[1].Name != "queue.2" {
		t.Fatalf("queues %+v", qs)
	}
	p := qs[0].Props
	if p.LockDurationMs != 30000 || p.DefaultMessageTtlMs != 3600000 || p.DuplicateDetectionWindowMs != 20000 ||
		p.MaxDeliveryCount != 3 || !p.DeadLetteringOnMessageExpiration || !p.RequiresDuplicateDetection {
		t.Fatalf("properties %+v", p)
	}
	if p := qs[1].Props; !p.RequiresSession || p.GetSessionAcceptWaitMs() != 2_500 || qs[0].Props.SessionAcceptWaitMs != nil {
		t.Fatalf("queue.2's SessionAcceptWait (quorumbus's own): %+v", p)
	}
	os.WriteFile(path, []byte(`{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"LockDuration": "1 minute"}}]}]}}`), 0o644)
	if _, err := LoadEmulatorConfig(path); err == nil {
		t.Fatal("a malformed duration was accepted")
	}
}

// emulatorTopics is the topic part of the official emulator's sample
// Config.json, with an action and parameters added.
const emulatorTopics = `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Topics": [{
  "Name": "topic.1",
  "Properties": {"DefaultMessageTimeToLive": "PT1H", "DuplicateDetectionHistoryTimeWindow": "PT20S", "RequiresDuplicateDetection": false},
  "Subscriptions": [
    {"Name": "subscription.1",
     "Properties": {"DeadLetteringOnMessageExpiration": false, "DefaultMessageTimeToLive": "PT1H", "LockDuration": "PT1M",
                    "MaxDeliveryCount": 3, "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "RequiresSession": false},
     "Rules": [
       {"Name": "app-prop-filter-1", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {
          "ContentType": "application/text", "CorrelationId": "id1", "Label": "subject1", "MessageId": "msgid1",
          "ReplyTo": "someQueue", "ReplyToSessionId": "sessionId", "SessionId": "session1", "To": "xyz",
          "Properties": {"prop1": "value1", "n": 3}}}},
       {"Name": "sql-filter-1", "Properties": {"FilterType": "Sql",
          "SqlFilter": {"SqlExpression": "sys.MessageId = '123456' AND userProp1 = @v", "Parameters": {"@v": "value1"}},
          "Action": {"SqlExpression": "SET sys.To = 'Entity'"}}}
     ]},
    {"Name": "subscription.2", "Properties": {"RequiresSession": true, "SessionAcceptWait": "PT5S"}}
  ]}]}]}}`

func TestLoadEmulatorConfigTopics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Config.json")
	os.WriteFile(path, []byte(emulatorTopics), 0o644)
	specs, err := LoadEmulatorConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Kind.String()+" "+s.Name)
	}
	want := "ENTITY_KIND_TOPIC topic.1, ENTITY_KIND_SUBSCRIPTION topic.1/Subscriptions/subscription.1, ENTITY_KIND_SUBSCRIPTION topic.1/Subscriptions/subscription.2"
	if got := strings.Join(names, ", "); got != want {
		t.Fatalf("specs %s\nwant %s", got, want)
	}
	if p := specs[0].Props; p.DefaultMessageTtlMs != 3_600_000 || p.DuplicateDetectionWindowMs != 20_000 {
		t.Errorf("topic properties %v", p)
	}
	if p := specs[1].Props; p.LockDurationMs != 60_000 || p.MaxDeliveryCount != 3 || p.DefaultMessageTtlMs != 3_600_000 {
		t.Errorf("subscription properties %v", p)
	}
	if !specs[2].Props.RequiresSession || specs[2].Props.GetSessionAcceptWaitMs() != 5_000 || len(specs[2].Rules) != 0 {
		t.Errorf("subscription.2: %v, rules %v", specs[2].Props, specs[2].Rules)
	}
	rules := specs[1].Rules
	if len(rules) != 2 {
		t.Fatalf("rules %v", rules)
	}
	wantCorr := &pb.CorrelationFilter{ContentType: "application/text", CorrelationId: "id1", Subject: "subject1", MessageId: "msgid1",
		ReplyTo: "someQueue", ReplyToSessionId: "sessionId", SessionId: "session1", To: "xyz",
		Properties: map[string]*pb.RuleValue{
			"prop1": {Value: &pb.RuleValue_StringValue{StringValue: "value1"}},
			"n":     {Value: &pb.RuleValue_LongValue{LongValue: 3}},
		}}
	if rules[0].Name != "app-prop-filter-1" || !proto.Equal(rules[0].GetCorrelationFilter(), wantCorr) {
		t.Errorf("correlation rule %v", rules[0])
	}
	sql := rules[1].GetSqlFilter()
	if rules[1].Name != "sql-filter-1" || sql.GetExpression() != "sys.MessageId = '123456' AND userProp1 = @v" ||
		sql.Parameters["@v"].GetStringValue() != "value1" || rules[1].Action.GetExpression() != "SET sys.To = 'Entity'" {
		t.Errorf("sql rule %v", rules[1])
	}

	os.WriteFile(path, []byte(strings.Replace(emulatorTopics, `"FilterType": "Sql"`, `"FilterType": "Regex"`, 1)), 0o644)
	if _, err := LoadEmulatorConfig(path); err == nil || !strings.Contains(err.Error(), "Regex") {
		t.Errorf("an unknown FilterType: %v", err)
	}
}
