package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// cannedTransport answers the Go admin client's list with a page, and
// its request for the next page with an empty feed, without a network.
type cannedTransport struct{ page, empty []byte }

func (c cannedTransport) Do(r *http.Request) (*http.Response, error) {
	body := c.page
	if skip := r.URL.Query().Get("$skip"); skip != "" && skip != "0" {
		body = c.empty
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {feedType}},
		Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
}

// queueFeed is one page of n queues with their counts, as the gateway
// answers a list; with whole, its entries are written as an entry
// answered alone is, as the gateway's feeds were before inFeed trimmed
// them.
func queueFeed(t testing.TB, n int, whole bool) []byte {
	g := consoleGateway(t)
	es := benchQueues(n)
	for _, e := range es { // as created by default
		e.Properties.ForwardTo, e.Properties.UserMetadata, e.Properties.RequiresSession = "", "", false
	}
	r := httptest.NewRequest("GET", "https://ns.test/$Resources/Queues?api-version=2024-05&$top=10000", nil)
	w := httptest.NewRecorder()
	q := newRequest(w, r)
	entries := make([]entryOut, len(es))
	for i, e := range es {
		entries[i] = g.entry(q, e, describeQueue(e, &Counts{Active: uint64(i), DeadLetter: 2, Scheduled: 3, SizeBytes: 1234, AccessedAtMs: 1_700_000_200_789}, nil))
	}
	if whole {
		feed := feedOut{NS: atomNS, Title: titleOut{Type: "text", Text: "Queues"}, ID: q.selfLink("$Resources/Queues"),
			Updated: atomTime(time.Now()), Links: []linkOut{{Rel: "self", Href: q.selfLink("$Resources/Queues")}}, Entries: entries}
		return []byte(written(feed.writeAtom))
	}
	g.writeFeed(q, "Queues", "$Resources/Queues", 0, n, false, entries)
	return w.Body.Bytes()
}

func listThrough(tb testing.TB, ac *admin.Client, n int) {
	got := 0
	p := ac.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: int32(n)})
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		got += len(page.QueueRuntimeProperties)
	}
	if got != n {
		tb.Fatalf("the Go admin client read %d queues of %d", got, n)
	}
}

// BenchmarkGoAdminListDecode: what the Go admin client (v1.11.0) spends
// reading one page of 2,000 queues with their runtime properties as the
// gateway writes it, without a network, and what it would spend on
// other shapes of the same page: entries written whole, as answered
// alone (each declaring the ATOM namespace, with its published time,
// author and self link: what the gateway wrote before), 1,000 bytes more
// text, 10 more unknown or known elements an entry. Its encoding/xml
// decoding is the floor under listing 10,000 entities in a second
// (docs/performance.md).
// Reported per entity: wall time, CPU time of the process (run it with
// GOMAXPROCS=1 on a shared machine, and read the least of -count runs)
// and bytes.
func BenchmarkGoAdminListDecode(b *testing.B) {
	const n = 2000
	feed := string(queueFeed(b, n, false))
	whole := string(queueFeed(b, n, true))
	empty := []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + `<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Queues</title></feed>`)
	insert := func(what string) func(string) string {
		return func(s string) string { return strings.ReplaceAll(s, "<AutoDeleteOnIdle>", what+"<AutoDeleteOnIdle>") }
	}
	for _, v := range []struct {
		name  string
		shape func(string) string
	}{
		{"as-written", func(s string) string { return s }},
		{"entries-whole", func(string) string { return whole }},
		{"plus-1000-bytes-text", insert("<Pad>" + strings.Repeat("x", 1000-len("<Pad></Pad>")) + "</Pad>")},
		{"plus-10-unknown-elements", insert(strings.Repeat("<P>1</P>", 10))},
		{"plus-10-known-elements", insert(strings.Repeat("<Status>Active</Status>", 10))},
	} {
		page := []byte(v.shape(feed))
		ac, err := admin.NewClientFromConnectionString("Endpoint=sb://ns.test/;SharedAccessKeyName=k;SharedAccessKey=v",
			&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: cannedTransport{page, empty}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(v.name, func(b *testing.B) {
			cpu0 := processCPU()
			for b.Loop() {
				listThrough(b, ac, n)
			}
			per := float64(b.N * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per/1e3, "µs/entity")
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/per/1e3, "cpu-µs/entity")
			b.ReportMetric(float64(len(page))/n, "B/entity")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestGoAdminClientReadsFeeds: a feed as the gateway writes it (entries
// carrying what the clients read, inFeed) is read whole by the Go admin
// client.
func TestGoAdminClientReadsFeeds(t *testing.T) {
	const n = 3
	page := queueFeed(t, n, false)
	for _, unread := range []string{`<entry xmlns=`, `<published>`, `<link rel="self" href="https://ns.test/bench`} {
		if bytes.Contains(page, []byte(unread)) {
			t.Fatalf("the entries of a feed carry %s:\n%s", unread, page)
		}
	}
	if !bytes.Contains(page, []byte(`<feed xmlns="`+atomNS+`">`)) || bytes.Count(page, []byte(`<author>`)) != 1 {
		t.Fatalf("the feed does not declare the ATOM namespace and its author once:\n%s", page)
	}
	ac, err := admin.NewClientFromConnectionString("Endpoint=sb://ns.test/;SharedAccessKeyName=k;SharedAccessKey=v",
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: cannedTransport{page, []byte(`<feed xmlns="` + atomNS + `"></feed>`)}}})
	if err != nil {
		t.Fatal(err)
	}
	p := ac.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: n})
	page1, err := p.NextPage(context.Background())
	if err != nil || len(page1.QueueRuntimeProperties) != n {
		t.Fatalf("%+v, %v", page1, err)
	}
	if q := page1.QueueRuntimeProperties[2]; q.QueueName != "bench-00002" || q.ActiveMessageCount != 2 || q.DeadLetterMessageCount != 2 ||
		q.ScheduledMessageCount != 3 || q.SizeInBytes != 1234 || q.CreatedAt.IsZero() {
		t.Fatalf("read %+v", q)
	}
}
