package gateway

import (
	"bytes"
	"encoding/xml"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// ruleEntry wraps a RuleDescription's children as the Go admin client
// sends them.
func ruleEntry(inner string) string {
	return `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` +
		`<RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` +
		inner + `</RuleDescription></content></entry>`
}

// sentSQLRule is what azservicebus/admin v1.11.0 puts for a SQL filter
// with parameters and a SQL action.
const sentSQLRule = `<Filter i:type="SqlFilter"><SqlExpression>a = @s AND b &gt; @n</SqlExpression><Parameters>` +
	`<KeyValueOfstringanyType><Key>@s</Key><Value i:type="l28:string" xmlns:l28="http://www.w3.org/2001/XMLSchema">x</Value></KeyValueOfstringanyType>` +
	`<KeyValueOfstringanyType><Key>@n</Key><Value i:type="l28:int" xmlns:l28="http://www.w3.org/2001/XMLSchema">5</Value></KeyValueOfstringanyType>` +
	`<KeyValueOfstringanyType><Key>@d</Key><Value i:type="l28:double" xmlns:l28="http://www.w3.org/2001/XMLSchema">1.500000</Value></KeyValueOfstringanyType>` +
	`<KeyValueOfstringanyType><Key>@t</Key><Value i:type="l28:dateTime" xmlns:l28="http://www.w3.org/2001/XMLSchema">2026-01-02T03:04:05Z</Value></KeyValueOfstringanyType>` +
	`<KeyValueOfstringanyType><Key>@b</Key><Value i:type="l28:boolean" xmlns:l28="http://www.w3.org/2001/XMLSchema">true</Value></KeyValueOfstringanyType>` +
	`</Parameters></Filter><Action i:type="SqlRuleAction"><SqlExpression>SET c = 1</SqlExpression></Action><Name>r1</Name>`

func decodeRuleEntry(t *testing.T, inner string) (*placementpb.Rule, error) {
	t.Helper()
	kind, fields, err := DecodeEntry([]byte(ruleEntry(inner)))
	if err != nil || kind != "RuleDescription" {
		t.Fatalf("DecodeEntry: %s, %v", kind, err)
	}
	return DecodeRule(fields)
}

func TestDecodeRule(t *testing.T) {
	r, err := decodeRuleEntry(t, sentSQLRule)
	if err != nil {
		t.Fatal(err)
	}
	d := placementpb.RuleDescriptionOf(r)
	want := map[string]any{"@s": "x", "@n": int64(5), "@d": 1.5, "@t": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "@b": true}
	if d.Name != "r1" || d.FilterType != "Sql" || d.SqlExpression != "a = @s AND b > @n" || d.ActionExpression != "SET c = 1" || len(d.SqlParameters) != len(want) {
		t.Fatalf("decoded %+v", d)
	}
	for k, v := range want {
		if d.SqlParameters[k] != v {
			t.Errorf("parameter %s = %#v, want %#v", k, d.SqlParameters[k], v)
		}
	}

	r, err = decodeRuleEntry(t, `<Filter i:type="CorrelationFilter"><CorrelationId>c</CorrelationId><Label>l</Label><Properties>`+
		`<KeyValueOfstringanyType><Key>k</Key><Value i:type="d6p1:long" xmlns:d6p1="http://www.w3.org/2001/XMLSchema">9000000000</Value></KeyValueOfstringanyType>`+
		`</Properties></Filter><Name>c</Name>`)
	if err != nil {
		t.Fatal(err)
	}
	cf := r.GetCorrelationFilter()
	if cf.GetCorrelationId() != "c" || cf.GetSubject() != "l" || cf.GetProperties()["k"].GetLongValue() != 9_000_000_000 {
		t.Fatalf("correlation filter = %v", cf)
	}

	for inner, want := range map[string]string{
		`<Filter i:type="TrueFilter"><SqlExpression>1=1</SqlExpression></Filter>`:  "true",
		`<Filter i:type="FalseFilter"><SqlExpression>1=0</SqlExpression></Filter>`: "false",
		`<Name>x</Name>`: "true", // no filter: Service Bus's default
	} {
		r, err := decodeRuleEntry(t, inner)
		if err != nil {
			t.Fatalf("%s: %v", inner, err)
		}
		if got := map[bool]string{true: "true", false: "false"}[r.GetTrueFilter()]; got != want {
			t.Errorf("%s: decoded %v", inner, r)
		}
	}
}

func TestDecodeRuleRefuses(t *testing.T) {
	for _, inner := range []string{
		`<Filter><SqlExpression>1=1</SqlExpression></Filter>`,
		`<Filter i:type="LambdaFilter"/>`,
		`<Filter i:type="SqlFilter"><SqlExpression> </SqlExpression></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=1</SqlExpression><CompatibilityLevel>10</CompatibilityLevel></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=1</SqlExpression><Bogus/></Filter>`,
		`<Filter i:type="TrueFilter"><Parameters/></Filter>`,
		`<Filter i:type="CorrelationFilter"><Label>a</Label><Subject>b</Subject></Filter>`,
		`<Filter i:type="CorrelationFilter"><Colour>a</Colour></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=@x</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@x</Key><Value i:type="l28:guid">1</Value></KeyValueOfstringanyType></Parameters></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=@x</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@x</Key><Value i:nil="true"/></KeyValueOfstringanyType></Parameters></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=@x</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@x</Key><Value i:type="l28:int">x</Value></KeyValueOfstringanyType></Parameters></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=@x</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@x</Key></KeyValueOfstringanyType></Parameters></Filter>`,
		`<Filter i:type="SqlFilter"><SqlExpression>a=@x</SqlExpression><Parameters><Other/></Parameters></Filter>`,
		`<Action i:type="SqlRuleAction"/>`,
		`<Action i:type="Teleport"/>`,
		`<Colour>red</Colour>`,
	} {
		if r, err := decodeRuleEntry(t, inner); !errors.Is(err, ErrBadProperty) {
			t.Errorf("%s: decoded %v, %v; want ErrBadProperty", inner, r, err)
		}
	}
}

// TestRuleXMLRoundTrip: what the gateway writes of a rule reads back as
// the same rule, so a client can send back what it read.
func TestRuleXMLRoundTrip(t *testing.T) {
	for _, inner := range []string{
		sentSQLRule,
		`<Filter i:type="CorrelationFilter"><MessageId>m</MessageId><To>t</To><ReplyTo>r</ReplyTo><SessionId>s</SessionId><ReplyToSessionId>rs</ReplyToSessionId><ContentType>ct</ContentType><Properties><KeyValueOfstringanyType><Key>k</Key><Value i:type="l28:duration" xmlns:l28="http://www.w3.org/2001/XMLSchema">PT1M</Value></KeyValueOfstringanyType></Properties></Filter><Name>c</Name>`,
		`<Filter i:type="FalseFilter"/><Name>f</Name>`,
		`<Filter i:type="TrueFilter"/><Action i:type="SqlRuleAction"><SqlExpression>SET a = @v</SqlExpression><Parameters><KeyValueOfstringanyType><Key>@v</Key><Value i:type="l28:int" xmlns:l28="http://www.w3.org/2001/XMLSchema">-3</Value></KeyValueOfstringanyType></Parameters></Action><Name>a</Name>`,
	} {
		r, err := decodeRuleEntry(t, inner)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := xml.NewEncoder(&buf).Encode(describeRule(r)); err != nil {
			t.Fatal(err)
		}
		written := buf.String()
		if !strings.Contains(written, `i:type=`) {
			t.Fatalf("no i:type in %s", written)
		}
		kind, fields, err := DecodeEntry([]byte(`<entry><content>` + written + `</content></entry>`))
		if err != nil || kind != "RuleDescription" {
			t.Fatalf("reading back %s: %s, %v", written, kind, err)
		}
		back, err := DecodeRule(fields)
		if err != nil {
			t.Fatalf("reading back %s: %v", written, err)
		}
		if !proto.Equal(back, r) {
			t.Errorf("round trip of %s:\nwrote %s\nread  %v\nwant  %v", inner, written, back, r)
		}
	}
}

func TestDecodeTopicAndSubscription(t *testing.T) {
	kind, fields, err := DecodeEntry([]byte(`<entry><content><TopicDescription><DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive>` +
		`<EnableBatchedOperations>true</EnableBatchedOperations><Status>SendDisabled</Status><SubscriptionCount>3</SubscriptionCount></TopicDescription></content></entry>`))
	if err != nil || kind != "TopicDescription" {
		t.Fatal(kind, err)
	}
	tr, err := DecodeTopic(fields)
	if err != nil || tr.status != placementpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED || tr.desc.Properties().GetDefaultMessageTtlMs() != 0 {
		t.Fatalf("DecodeTopic = %+v, %v", tr, err)
	}
	for _, bad := range []string{
		`<AutoDeleteOnIdle>PT5M</AutoDeleteOnIdle>`, `<EnableExpress>true</EnableExpress>`, `<LockDuration>PT1M</LockDuration>`,
		`<UserMetadata>` + strings.Repeat("x", maxUserMetadata+1) + `</UserMetadata>`, `<FilteringMessagesBeforePublishing>true</FilteringMessagesBeforePublishing>`,
	} {
		_, fields, err := DecodeEntry([]byte(`<entry><content><TopicDescription>` + bad + `</TopicDescription></content></entry>`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeTopic(fields); !errors.Is(err, ErrBadProperty) {
			t.Errorf("topic %s: %v, want ErrBadProperty", bad, err)
		}
	}

	_, fields, err = DecodeEntry([]byte(`<entry><content><SubscriptionDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><LockDuration>PT30S</LockDuration>` +
		`<DeadLetteringOnFilterEvaluationExceptions>false</DeadLetteringOnFilterEvaluationExceptions>` +
		`<DefaultRuleDescription><Filter i:type="SqlFilter"><SqlExpression>a = 1</SqlExpression></Filter><Name>only</Name></DefaultRuleDescription>` +
		`</SubscriptionDescription></content></entry>`))
	if err != nil {
		t.Fatal(err)
	}
	sr, err := DecodeSubscription(fields)
	if err != nil || sr.desc.LockDuration != 30*time.Second || *sr.desc.DeadLetteringOnFilterEvaluationExceptions ||
		len(sr.rules) != 1 || sr.rules[0].GetName() != "only" || sr.rules[0].GetSqlFilter().GetExpression() != "a = 1" {
		t.Fatalf("DecodeSubscription = %+v, %v", sr, err)
	}
	for _, bad := range []string{
		`<ForwardTo>https://ns</ForwardTo>`, `<MaxSizeInMegabytes>5</MaxSizeInMegabytes>`, `<MaxDeliveryCount>0</MaxDeliveryCount>`,
		`<DefaultRuleDescription><Filter i:type="X"/></DefaultRuleDescription>`,
	} {
		_, fields, err := DecodeEntry([]byte(`<entry><content><SubscriptionDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance">` + bad + `</SubscriptionDescription></content></entry>`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeSubscription(fields); !errors.Is(err, ErrBadProperty) {
			t.Errorf("subscription %s: %v, want ErrBadProperty", bad, err)
		}
	}
}

// FuzzDecodeTopicsSubscriptionsRules feeds any body to the decoders of
// topic, subscription and rule descriptions: each either decodes or
// refuses with ErrBadXML or ErrBadProperty, and a decoded rule is written
// and read back unchanged.
func FuzzDecodeTopicsSubscriptionsRules(f *testing.F) {
	f.Add([]byte(ruleEntry(sentSQLRule)))
	f.Add([]byte(ruleEntry(`<Filter i:type="CorrelationFilter"><Label>l</Label><Properties><KeyValueOfstringanyType><Key>k</Key><Value i:type="d6p1:dateTime">2026-01-02T03:04:05</Value></KeyValueOfstringanyType></Properties></Filter>`)))
	f.Add([]byte(`<entry><content><TopicDescription><MaxSizeInMegabytes>1024</MaxSizeInMegabytes><AuthorizationRules/></TopicDescription></content></entry>`))
	f.Add([]byte(`<entry><content><SubscriptionDescription><DefaultRuleDescription><Filter i:type="TrueFilter"/></DefaultRuleDescription></SubscriptionDescription></content></entry>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, fields, err := DecodeEntry(body)
		if err != nil {
			return
		}
		var rules []*placementpb.Rule
		switch kind {
		case "TopicDescription":
			var tr topicRequest
			if tr, err = DecodeTopic(fields); err == nil {
				_ = tr.desc.Properties()
			}
		case "SubscriptionDescription":
			var sr subscriptionRequest
			if sr, err = DecodeSubscription(fields); err == nil {
				_ = sr.desc.Properties()
				rules = sr.rules
			}
		case "RuleDescription":
			var r *placementpb.Rule
			if r, err = DecodeRule(fields); err == nil {
				rules = []*placementpb.Rule{r}
			}
		default:
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBadProperty) && !errors.Is(err, ErrBadXML) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		for _, r := range rules {
			var buf bytes.Buffer
			if err := xml.NewEncoder(&buf).Encode(describeRule(r)); err != nil {
				t.Fatal(err)
			}
			_, fields, err := DecodeEntry([]byte(`<entry><content>` + buf.String() + `</content></entry>`))
			if err != nil {
				t.Fatalf("reading back %s: %v", buf.String(), err)
			}
			back, err := DecodeRule(fields)
			if err != nil {
				t.Fatalf("reading back %s: %v", buf.String(), err)
			}
			if !proto.Equal(back, r) {
				t.Fatalf("round trip: wrote %s, read %v, want %v", buf.String(), back, r)
			}
		}
	})
}

// TestForwardTarget: ForwardTo is a name or the URL Service Bus answers.
func TestForwardTarget(t *testing.T) {
	for in, want := range map[string]string{
		"q": "q", "https://ns.servicebus.windows.net/q": "q", "sb://ns/t/Subscriptions/s/": "t/Subscriptions/s", "": "",
	} {
		if got, err := forwardTarget(in); err != nil || got != want {
			t.Errorf("forwardTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://ns/q", "https://ns", "https://ns/"} {
		if _, err := forwardTarget(in); err == nil {
			t.Errorf("forwardTarget(%q) accepted", in)
		}
	}
}
