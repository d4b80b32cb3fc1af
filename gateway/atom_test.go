package gateway

import (
	"encoding/xml"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The body the Go admin client sent for CreateQueue, captured on the wire.
const capturedCreate = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><RequiresSession>true</RequiresSession><MaxDeliveryCount>5</MaxDeliveryCount><AuthorizationRules></AuthorizationRules></QueueDescription></content></entry>`

func queueEntry(props string) string {
	return `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="` + sbNS + `" xmlns:i="` + xsiNS + `">` + props + `</QueueDescription></content></entry>`
}

func TestDecodeCapturedCreate(t *testing.T) {
	kind, fields, err := DecodeEntry([]byte(capturedCreate))
	if err != nil || kind != "QueueDescription" {
		t.Fatalf("DecodeEntry = %q, %v", kind, err)
	}
	q, err := DecodeQueue(fields)
	if err != nil {
		t.Fatal(err)
	}
	if !q.desc.RequiresSession || q.desc.MaxDeliveryCount != 5 || !q.set["RequiresSession"] || q.set["EnablePartitioning"] {
		t.Fatalf("decoded %+v", q)
	}
}

func TestDecodeQueueProperties(t *testing.T) {
	_, fields, err := DecodeEntry([]byte(queueEntry(`<LockDuration>PT45S</LockDuration><MaxSizeInMegabytes>2048</MaxSizeInMegabytes>` +
		`<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive><DuplicateDetectionHistoryTimeWindow>PT1M</DuplicateDetectionHistoryTimeWindow>` +
		`<EnableBatchedOperations>true</EnableBatchedOperations><Status>ReceiveDisabled</Status><EnablePartitioning>true</EnablePartitioning>` +
		`<ForwardTo i:nil="true"/><UserMetadata></UserMetadata><SizeInBytes>99</SizeInBytes><MaxMessageSizeInKilobytes>1024</MaxMessageSizeInKilobytes>`)))
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodeQueue(fields)
	if err != nil {
		t.Fatal(err)
	}
	want := placementpb.QueueDescription{
		LockDuration: 45 * time.Second, MaxSizeInMegabytes: 2048, DefaultMessageTimeToLive: placementpb.Forever,
		DuplicateDetectionHistoryTimeWindow: time.Minute, EnablePartitioning: true, MaxMessageSizeInKilobytes: 1024,
	}
	if q.desc != want || q.status != placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED {
		t.Fatalf("decoded %+v, status %v", q.desc, q.status)
	}
	if p := q.desc.Properties(); p.DefaultMessageTtlMs != 0 {
		t.Fatalf("forever TTL stored as %d ms", p.DefaultMessageTtlMs)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body, reason string
		want               error
	}{
		{"not xml", "{}", "", ErrBadXML},
		{"no content", `<entry xmlns="http://www.w3.org/2005/Atom"></entry>`, "content", ErrBadXML},
		{"two descriptions", `<entry><content><QueueDescription/><QueueDescription/></content></entry>`, "2 elements", ErrBadXML},
		{"trailing element", capturedCreate + "<entry/>", "second element", ErrBadXML},
		{"twice", queueEntry(`<MaxDeliveryCount>5</MaxDeliveryCount><MaxDeliveryCount>6</MaxDeliveryCount>`), "twice", ErrBadXML},
		{"unknown", queueEntry(`<Colour>blue</Colour>`), "Colour", ErrBadProperty},
		{"bad bool", queueEntry(`<RequiresSession>yes</RequiresSession>`), "RequiresSession", ErrBadProperty},
		{"bad duration", queueEntry(`<LockDuration>1 minute</LockDuration>`), "LockDuration", ErrBadProperty},
		{"negative", queueEntry(`<MaxDeliveryCount>-1</MaxDeliveryCount>`), "MaxDeliveryCount", ErrBadProperty},
		{"status", queueEntry(`<Status>Creating</Status>`), "Status", ErrBadProperty},
		{"forwarding URL", queueEntry(`<ForwardTo>ftp://ns/other</ForwardTo>`), "ForwardTo", ErrBadProperty},
		{"express", queueEntry(`<EnableExpress>true</EnableExpress>`), "EnableExpress", ErrBadProperty},
		{"unbatched", queueEntry(`<EnableBatchedOperations>false</EnableBatchedOperations>`), "batches", ErrBadProperty},
		{"idle delete", queueEntry(`<AutoDeleteOnIdle>PT5M</AutoDeleteOnIdle>`), "idle", ErrBadProperty},
		{"metadata", queueEntry(`<UserMetadata>` + strings.Repeat("x", 1025) + `</UserMetadata>`), "UserMetadata", ErrBadProperty},
		{"rule without a name", queueEntry(`<AuthorizationRules><AuthorizationRule/></AuthorizationRules>`), "AuthorizationRules: rule 1: no KeyName", ErrBadProperty},
		{"nested value", queueEntry(`<LockDuration><x/></LockDuration>`), "elements", ErrBadProperty},
	} {
		kind, fields, err := DecodeEntry([]byte(tc.body))
		if err == nil && kind == "QueueDescription" {
			_, err = DecodeQueue(fields)
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v; want %v naming %q", tc.name, err, tc.want, tc.reason)
		}
		if got := httpStatus(err); got != 400 {
			t.Errorf("%s: answered %d, want 400", tc.name, got)
		}
	}
}

// TestDescribeQueueParsesBack: what a GET answers reads back, through the
// same decoder, into the properties it describes (a client that sends a
// description back unchanged changes nothing).
func TestDescribeQueueParsesBack(t *testing.T) {
	e := &placementpb.Entity{Name: "q", Properties: &placementpb.QueueProperties{
		LockDurationMs: 30_000, MaxDeliveryCount: 3, DuplicateDetectionWindowMs: 60_000, MaxSizeInMegabytes: 1024,
		MaxMessageSizeInKilobytes: 256, PartitionCount: 16, EnablePartitioning: true, RequiresSession: true,
		UserMetadata: " spaced & <escaped> ",
	}, CreatedAtMs: 1_700_000_000_000, UpdatedAtMs: 1_700_000_000_500}
	out, err := xml.Marshal(entryOut{NS: atomNS, Content: contentOut{Type: "application/xml", Body: describeQueue(e, &Counts{Active: 3}, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	_, fields, err := DecodeEntry(out)
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodeQueue(fields)
	if err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := placementpb.Describe(e.Properties)
	want.PartitionCount = 0 // the ATOM API has only EnablePartitioning
	if q.desc != want {
		t.Fatalf("read back %+v, want %+v", q.desc, want)
	}
	if !strings.Contains(string(out), `<CountDetails xmlns:d2p1="`+countNS+`"><d2p1:ActiveMessageCount>3</d2p1:ActiveMessageCount>`) || !strings.Contains(string(out), "<CreatedAt>2023-11-14T22:13:20Z</CreatedAt>") {
		t.Fatalf("answer lacks counts or times: %s", out)
	}
}

// FuzzDecodeEntry: any body is decoded or refused with ErrBadXML or
// ErrBadProperty (a 400), never a panic or another error.
func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte(capturedCreate))
	f.Add([]byte(queueEntry(`<LockDuration>PT1M</LockDuration><Status>Disabled</Status><ForwardTo i:nil="true"/>`)))
	f.Add([]byte(`<entry><content><TopicDescription><SupportOrdering>true</SupportOrdering></TopicDescription></content></entry>`))
	f.Add([]byte(`<?xml version="1.0"?><entry><content><QueueDescription><AuthorizationRules><a/></AuthorizationRules></QueueDescription></content></entry><!-- x -->`))
	f.Add([]byte(queueEntry(`<AuthorizationRules><AuthorizationRule i:type="SharedAccessAuthorizationRule"><ClaimType>SharedAccessKey</ClaimType><ClaimValue>None</ClaimValue>` +
		`<Rights><AccessRights>Listen</AccessRights><AccessRights>Send</AccessRights></Rights><KeyName>app</KeyName><PrimaryKey>k</PrimaryKey></AuthorizationRule></AuthorizationRules>`)))
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, fields, err := DecodeEntry(body)
		if err != nil {
			if !errors.Is(err, ErrBadXML) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if kind != "QueueDescription" {
			return
		}
		q, err := DecodeQueue(fields)
		if err != nil {
			if !errors.Is(err, ErrBadProperty) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		_ = q.desc.Properties()
		// The rules it asks for plan into catalog changes or a 400.
		have := []*placementpb.AuthorizationRule{{Name: "app", Entity: "q", Rights: 1, PrimaryKey: "k"}}
		if _, err := planAuthorizationRules("q", q.rules.rules, have); err != nil && !errors.Is(err, ErrBadProperty) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzAtomTime holds the hand-written atomTime to time.RFC3339Nano in
// UTC, whatever the zone or fraction (years 1678-2262, what nanoseconds
// since 1970 reach; TestAtomTimeFarYears has the others).
func FuzzAtomTime(f *testing.F) {
	for _, ms := range []int64{0, 1, 1_700_000_200_789, 1_700_000_200_000, 1_700_000_200_780, -1} {
		f.Add(ms*1e6, int64(0))
	}
	f.Add(int64(1_700_000_200_123_456_789), int64(3600*5+1800))
	f.Add(int64(-1), int64(-7200))
	f.Fuzz(func(t *testing.T, unixNano, zoneSec int64) {
		tm := time.Unix(0, unixNano).In(time.FixedZone("z", int(zoneSec%(24*3600))))
		if got, want := atomTime(tm), tm.UTC().Format(time.RFC3339Nano); got != want {
			t.Fatalf("atomTime(%v) = %q, want %q", tm, got, want)
		}
	})
}

func TestAtomTimeFarYears(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 3, 1, 0, 0, 0, 500, time.UTC),
	} {
		if got, want := atomTime(tm), tm.Format(time.RFC3339Nano); got != want {
			t.Errorf("atomTime(%v) = %q, want %q", tm, got, want)
		}
	}
	if got := atomTime(time.Time{}); got != zeroTime {
		t.Errorf("atomTime(zero) = %q, want %q", got, zeroTime)
	}
}
