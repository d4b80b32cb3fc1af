package gateway

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// benchQueues are n queues with every property the feed writes set.
func benchQueues(n int) []*placementpb.Entity {
	es := make([]*placementpb.Entity, n)
	for i := range es {
		es[i] = &placementpb.Entity{
			Id: uint64(i + 1), Name: fmt.Sprintf("bench-%05d", i), Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE,
			Status: placementpb.EntityStatus_ENTITY_STATUS_ACTIVE, PartitionGroups: []uint64{1},
			CreatedAtMs: 1_700_000_000_123, UpdatedAtMs: 1_700_000_100_456,
			Properties: &placementpb.QueueProperties{LockDurationMs: 30_000, MaxDeliveryCount: 7, RequiresSession: true,
				ForwardTo: "other", UserMetadata: "team <a&b> \"x\" 'y'"},
		}
	}
	return es
}

// BenchmarkQueueFeed writes one page of 10,000 queues with their counts,
// as a list of the whole namespace in one page does after reading the
// catalog and the counters.
func BenchmarkQueueFeed(b *testing.B) {
	g := consoleGateway(b)
	es := benchQueues(10_000)
	r := httptest.NewRequest("GET", "https://ns.test/$Resources/Queues?api-version=2021-05&$top=10000", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{header: http.Header{}}
		q := newRequest(w, r)
		entries := make([]entryOut, len(es))
		for i, e := range es {
			entries[i] = g.entry(q, e, describeQueue(e, &Counts{Active: uint64(i), DeadLetter: 2, Scheduled: 3, SizeBytes: 1234, AccessedAtMs: 1_700_000_200_789}, nil))
		}
		g.writeFeed(q, "Queues", "$Resources/Queues", 0, 10_000, true, entries)
		b.SetBytes(w.n)
	}
}

// discardWriter counts what is written and keeps nothing, as a client
// reading the answer off the network costs the writer nothing.
type discardWriter struct {
	header http.Header
	n      int64
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(int)     {}
func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	return len(b), nil
}

// marshalReference is how the answers were written before the hand
// written writer: encoding/xml, then its numeric references rewritten
// into those the JavaScript client's parser reads. The writer must give
// the same bytes.
func marshalReference(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	if err := xml.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return referenceRefs.Replace(buf.String())
}

var referenceRefs = strings.NewReplacer("&#39;", "&apos;", "&#34;", "&quot;", "&#xA;", "\n", "&#x9;", "\t")

func written(write func(*xmlWriter)) string {
	w := httptest.NewRecorder()
	writeDoc(w, 200, entryType, write)
	return w.Body.String()
}

// awkward needs every kind of escaping: markup characters, quotes,
// white space, a carriage return, a control character, invalid UTF-8, a
// noncharacter, and characters beyond ASCII and the BMP.
const awkward = "a<b>&c\"d'e\tf\ng\rh\x01i\xffj\uFFFEk é 😀 ]]> &amp;#39;"

// TestAtomWriterMatchesEncodingXML writes every document the API answers
// with every property set (and with the optional ones left out), names
// and UserMetadata that need escaping, and compares with encoding/xml.
func TestAtomWriterMatchesEncodingXML(t *testing.T) {
	g := consoleGateway(t)
	r := httptest.NewRequest("GET", "https://ns.test/x?api-version=2021-05%0A%22", nil)
	q := newRequest(nil, r)
	queue := &placementpb.Entity{
		Id: 7, Name: "q" + awkward, Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE, Degraded: true,
		Status: placementpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED, PartitionGroups: []uint64{1, 2},
		CreatedAtMs: 1_700_000_000_123, UpdatedAtMs: 1_700_000_100_456,
		Properties: &placementpb.QueueProperties{LockDurationMs: 45_000, MaxDeliveryCount: 9, RequiresSession: true,
			RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 90_000, DeadLetteringOnMessageExpiration: true,
			DefaultMessageTtlMs: 3_600_000, MaxSizeInMegabytes: 2048, MaxMessageSizeInKilobytes: 1024,
			PartitionCount: 2, EnablePartitioning: true,
			ForwardTo: "to" + awkward, ForwardDeadLetteredMessagesTo: "dlq" + awkward, UserMetadata: awkward},
	}
	plain := &placementpb.Entity{Name: "plain", Properties: &placementpb.QueueProperties{}}
	topic := proto.Clone(queue).(*placementpb.Entity)
	topic.Kind, topic.Properties.LockDurationMs, topic.Properties.RequiresSession = placementpb.EntityKind_ENTITY_KIND_TOPIC, 0, false
	sub := proto.Clone(queue).(*placementpb.Entity)
	sub.Kind, sub.Properties.DeadLetteringOnFilterEvaluationExceptions = placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, proto.Bool(false)
	counts := &Counts{Active: 1, DeadLetter: 2, Scheduled: 3, SizeBytes: 4, AccessedAtMs: 1_700_000_200_789}
	values := map[string]any{
		"s" + awkward: awkward, "b": true, "i": int64(-7), "l": int64(1) << 40, "d": 2.5,
		"t": time.UnixMilli(1_700_000_000_001), "dur": -90 * time.Second, "x": uint8(3),
	}
	sqlRule := describeRule(&placementpb.Rule{Name: "r"})
	sqlRule.Name = "r" + awkward
	sqlRule.Filter = filterOut{Type: "SqlFilter", SQLExpression: ptr("a = @p AND b <> '" + awkward + "'"),
		CompatibilityLevel: sqlCompatibilityLevel, Parameters: valuesXML(values)}
	sqlRule.Action = actionOut{Type: "SqlRuleAction", SQLExpression: "SET x = '" + awkward + "'",
		CompatibilityLevel: sqlCompatibilityLevel, Parameters: valuesXML(values)}
	corrRule := describeRule(&placementpb.Rule{Name: "c", CreatedAtMs: 1_700_000_000_002})
	corrRule.Filter = filterOut{Type: "CorrelationFilter", CorrelationID: "c" + awkward, MessageID: "m" + awkward, To: "t" + awkward,
		ReplyTo: "r" + awkward, Label: "l" + awkward, SessionID: "s" + awkward, ReplyToSessionID: "rs" + awkward,
		ContentType: "ct" + awkward, Properties: valuesXML(values)}
	empty := ""
	oddRule := describeRule(&placementpb.Rule{Name: "e"})
	oddRule.Filter = filterOut{Type: "SqlFilter", SQLExpression: &empty, Properties: &valuesOut{}}
	figures := topicFigures{counts: counts, subscriptions: 3, sql: 2, correlation: 1, haveSubscriptions: true}

	docs := map[string]struct {
		write func(*xmlWriter)
		ref   any
	}{}
	add := func(name string, e entryOut) {
		docs[name] = struct {
			write func(*xmlWriter)
			ref   any
		}{e.writeAtom, e}
	}
	authRules := []*placementpb.AuthorizationRule{
		{Name: "r" + awkward, Entity: queue.Name, Rights: 7, PrimaryKey: "p" + awkward, SecondaryKey: "s" + awkward, CreatedAtMs: 1_700_000_000_001, UpdatedAtMs: 1_700_000_000_002},
		{Name: "listen", Entity: queue.Name, Rights: 1, PrimaryKey: "k"}, // no secondary key, no times
	}
	add("queue", g.entry(q, queue, describeQueue(queue, counts, authRules)))
	add("topic with rules", g.entryAt(q, topic.Name, topic.Name, 1, 2, describeTopic(topic, figures, authRules)))
	add("queue without counts", g.entry(q, queue, describeQueue(queue, nil, nil)))
	add("plain queue", g.entry(q, plain, describeQueue(plain, &Counts{}, nil)))
	add("topic", g.entryAt(q, topic.Name, topic.Name, 1, 2, describeTopic(topic, figures, nil)))
	add("topic without figures", g.entryAt(q, topic.Name, topic.Name, 0, 0, describeTopic(topic, topicFigures{}, nil)))
	add("subscription", g.entryAt(q, sub.Name, "s"+awkward, 1, 2, describeSubscription(sub, counts)))
	add("plain subscription", g.entryAt(q, "t/Subscriptions/s", "s", 1, 2, describeSubscription(plain, nil)))
	add("sql rule", g.entryAt(q, "r", sqlRule.Name, 1, 1, sqlRule))
	add("correlation rule", g.entryAt(q, "c", "c", 1, 1, corrRule))
	add("true rule", g.entryAt(q, "t", "t", 1, 1, describeRule(&placementpb.Rule{Name: "t"})))
	add("false rule", g.entryAt(q, "f", "f", 1, 1, describeRule(&placementpb.Rule{Name: "f", Filter: &placementpb.Rule_FalseFilter{FalseFilter: true}})))
	add("odd rule", g.entryAt(q, "e", "e", 1, 1, oddRule))
	add("no author, no body", entryOut{NS: atomNS, ID: awkward, Title: titleOut{Text: awkward}})
	nsInfo := namespaceInfoOut{NS: sbNS, NSI: xsiNS, CreatedTime: "c", ModifiedTime: "m", MessagingSKU: "Standard", Name: awkward, NamespaceType: "Messaging"}
	add("namespace info", entryOut{NS: atomNS, ID: "i", Content: contentOut{Type: "application/xml", Body: nsInfo}})
	feed := &feedOut{NS: atomNS, Title: titleOut{Type: "text", Text: "Queues"}, ID: q.selfLink("$Resources/Queues"), Updated: "u",
		Author:  &authorOut{Name: awkward},
		Links:   []linkOut{{Rel: "self", Href: "h" + awkward}, {Rel: "next", Href: "n"}},
		Entries: inFeed([]entryOut{g.entry(q, queue, describeQueue(queue, counts, authRules)), g.entry(q, plain, describeQueue(plain, nil, nil))})}
	docs["feed"] = struct {
		write func(*xmlWriter)
		ref   any
	}{feed.writeAtom, feed}
	emptyFeed := &feedOut{NS: atomNS}
	docs["empty feed"] = struct {
		write func(*xmlWriter)
		ref   any
	}{emptyFeed.writeAtom, emptyFeed}
	errDoc := errorOut{Code: 400, Detail: awkward}
	docs["error"] = struct {
		write func(*xmlWriter)
		ref   any
	}{errDoc.writeAtom, errDoc}

	for name, d := range docs {
		got, want := written(d.write), marshalReference(t, d.ref)
		if got != want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestAtomWriterFlushes writes a feed longer than the writer's buffer:
// it arrives whole, in pieces.
func TestAtomWriterFlushes(t *testing.T) {
	g := consoleGateway(t)
	r := httptest.NewRequest("GET", "https://ns.test/$Resources/Queues", nil)
	q := newRequest(nil, r)
	es := benchQueues(100)
	feed := &feedOut{NS: atomNS}
	for _, e := range es {
		feed.Entries = append(feed.Entries, g.entry(q, e, describeQueue(e, nil, nil)))
	}
	w := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	writeDoc(w, 200, feedType, feed.writeAtom)
	if want := marshalReference(t, feed); w.Body.String() != want {
		t.Fatalf("a long feed differs from encoding/xml's")
	}
	if w.Body.Len() < 3*flushSize || w.writes < 3 {
		t.Fatalf("%d bytes in %d writes", w.Body.Len(), w.writes)
	}
}

type countingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.ResponseRecorder.Write(b)
}

// FuzzEscape: any string is escaped as encoding/xml escapes it, with the
// references rewritten; the result parses back to the string (what
// encoding/xml keeps of it).
func FuzzEscape(f *testing.F) {
	f.Add(awkward)
	f.Add("")
	f.Add("plain")
	f.Add("\xed\xa0\x80\uFFFD\U0010FFFF\x7f")
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		if err := xml.EscapeText(&want, []byte(s)); err != nil {
			t.Fatal(err)
		}
		if got := string(appendEscaped(nil, s)); got != referenceRefs.Replace(want.String()) {
			t.Fatalf("escaped %q as %q, encoding/xml as %q", s, got, want.String())
		}
	})
}
