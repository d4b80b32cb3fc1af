package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// consoleClient is a signed-in console session: an HTTPS client with a
// cookie jar, as a browser has.
type consoleClient struct {
	t    *testing.T
	http *http.Client
	base string
}

func newConsoleClient(t *testing.T, c *cluster.Dev) *consoleClient {
	hc := trustingClient(t, c)
	hc.Jar, _ = cookiejar.New(nil)
	return &consoleClient{t: t, http: hc, base: "https://" + c.Admin.Addr() + "/$console/api/"}
}

// post calls a console endpoint and decodes its answer into out; it
// returns the status.
func (cc *consoleClient) post(path string, in, out any) int {
	cc.t.Helper()
	body, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, cc.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Quorumbus-Console", "1")
	resp, err := cc.http.Do(req)
	if err != nil {
		cc.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func (cc *consoleClient) get(path string, out any) int {
	cc.t.Helper()
	resp, err := cc.http.Get(cc.base + path)
	if err != nil {
		cc.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(out)
	return resp.StatusCode
}

// deadLetterAll sends n messages to queue, colour red for the even ones
// and blue for the odd ones, receives them and dead-letters each with the
// reason "bad-<colour>".
func deadLetterAll(t *testing.T, ctx context.Context, client *azservicebus.Client, queue string, n int) {
	t.Helper()
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	for i := range n {
		colour := "red"
		if i%2 == 1 {
			colour = "blue"
		}
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%s-%d", colour, i),
			ApplicationProperties: map[string]any{"colour": colour}}, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	for got := 0; got < n; {
		msgs, err := rcv.ReceiveMessages(ctx, n-got, nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			reason := "bad-" + m.ApplicationProperties["colour"].(string)
			if err := rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason}); err != nil {
				t.Fatalf("dead-letter: %v", err)
			}
			got++
		}
	}
}

// receiveCompleted receives n messages from queue and completes them.
func receiveCompleted(t *testing.T, ctx context.Context, client *azservicebus.Client, queue string, n int) []string {
	t.Helper()
	rcv, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close(ctx)
	var bodies []string
	for len(bodies) < n {
		msgs, err := rcv.ReceiveMessages(ctx, n-len(bodies), nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
			if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(bodies)
	return bodies
}

func runtimeCounts(t *testing.T, ctx context.Context, ac *admin.Client, queue string) (active, dead int32) {
	t.Helper()
	rp, err := ac.GetQueueRuntimeProperties(ctx, queue, nil)
	if err != nil || rp == nil {
		t.Fatalf("GetQueueRuntimeProperties(%s): %v", queue, err)
	}
	return rp.ActiveMessageCount, rp.DeadLetterMessageCount
}

// TestConsoleRedriveAndPurge: through the console's endpoints (the ones
// its page calls), dead-lettered messages that match a filter go back to
// their queue and are received again with the SDK; purges empty the
// dead-letter queue and the queue; on a plain and a partitioned queue.
func TestConsoleRedriveAndPurge(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc := newConsoleClient(t, c)

	var e map[string]string
	if code := cc.get("namespace", &e); code != http.StatusUnauthorized {
		t.Fatalf("namespace before signing in: %d, want 401", code)
	}
	if code := cc.post("signin", map[string]string{"keyName": sas.DevKeyName, "key": "wrong"}, &e); code != http.StatusUnauthorized {
		t.Fatalf("sign-in with a wrong key: %d, want 401", code)
	}
	if code := cc.post("signin", map[string]string{"keyName": sas.DevKeyName, "key": sas.DevKey}, &e); code != http.StatusOK {
		t.Fatalf("sign-in: %d %v", code, e)
	}

	for _, tc := range []struct {
		name        string
		partitioned bool
	}{{"plain", false}, {"spread", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ac.CreateQueue(ctx, tc.name, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
				EnablePartitioning: to.Ptr(tc.partitioned),
			}}); err != nil {
				t.Fatal(err)
			}
			waitRoutable(t, c, tc.name)
			deadLetterAll(t, ctx, client, tc.name, 6)
			if a, d := runtimeCounts(t, ctx, ac, tc.name); a != 0 || d != 6 {
				t.Fatalf("after dead-lettering: active %d, dead-lettered %d", a, d)
			}
			var msgs []map[string]any
			if code := cc.get("messages?dlq=1&name="+tc.name, &msgs); code != http.StatusOK || len(msgs) != 6 {
				t.Fatalf("peek of the dead-letter queue: %d, %d messages", code, len(msgs))
			}
			if msgs[0]["deadLetterReason"] == "" || msgs[0]["body"] == "" {
				t.Errorf("a peeked dead-lettered message: %v", msgs[0])
			}

			var moved map[string]int
			if code := cc.post("redrive", map[string]any{"name": tc.name, "filter": "colour = 'red' AND DeadLetterReason = 'bad-red'", "rate": 1000}, &moved); code != http.StatusOK || moved["moved"] != 3 {
				t.Fatalf("re-drive of the red ones: %d %v", code, moved)
			}
			if got, want := receiveCompleted(t, ctx, client, tc.name, 3), []string{"red-0", "red-2", "red-4"}; !slices.Equal(got, want) {
				t.Fatalf("received after re-drive %v, want %v", got, want)
			}
			if a, d := runtimeCounts(t, ctx, ac, tc.name); a != 0 || d != 3 {
				t.Fatalf("after re-driving 3: active %d, dead-lettered %d", a, d)
			}

			var purged map[string]int
			if code := cc.post("purge", map[string]any{"name": tc.name, "deadLetter": true}, &purged); code != http.StatusOK || purged["purged"] != 3 {
				t.Fatalf("purge of the dead-letter queue: %d %v", code, purged)
			}
			snd, err := client.NewSender(tc.name, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil); err != nil {
					t.Fatal(err)
				}
			}
			snd.Close(ctx)
			if code := cc.post("purge", map[string]any{"name": tc.name}, &purged); code != http.StatusOK || purged["purged"] != 5 {
				t.Fatalf("purge: %d %v", code, purged)
			}
			if a, d := runtimeCounts(t, ctx, ac, tc.name); a != 0 || d != 0 {
				t.Fatalf("after the purges: active %d, dead-lettered %d", a, d)
			}
		})
	}

	// The edit: what it names changes, the rest stays; what an admin
	// client's update may not do, it may not do either.
	if _, err := ac.UpdateQueue(ctx, "plain", admin.QueueProperties{UserMetadata: to.Ptr("keep me"), MaxDeliveryCount: to.Ptr[int32](4)}, nil); err != nil {
		t.Fatal(err)
	}
	var edited map[string]any
	if code := cc.post("update", map[string]any{"name": "plain", "properties": map[string]string{"LockDuration": "PT30S", "Status": "SendDisabled"}}, &edited); code != http.StatusOK {
		t.Fatalf("update: %d %v", code, edited)
	}
	q, err := ac.GetQueue(ctx, "plain", nil)
	if err != nil || q == nil {
		t.Fatalf("GetQueue: %v %v", q, err)
	}
	if *q.LockDuration != "PT30S" || *q.Status != admin.EntityStatusSendDisabled || *q.UserMetadata != "keep me" || *q.MaxDeliveryCount != 4 {
		t.Fatalf("after the console's edit: lock %s, status %s, metadata %q, max deliveries %d; want PT30S, SendDisabled, and the rest kept",
			*q.LockDuration, *q.Status, *q.UserMetadata, *q.MaxDeliveryCount)
	}
	for _, bad := range []map[string]string{
		{"RequiresSession": "true"},        // fixed at creation
		{"LockDuration": "thirty seconds"}, // not a duration
		{"Status": "Paused"},               // not a status
		{"AutoDeleteOnIdle": "PT5M"},       // not implemented
		{"NoSuchProperty": "1"},            // unknown
	} {
		var refused map[string]any
		if code := cc.post("update", map[string]any{"name": "plain", "properties": bad}, &refused); code != http.StatusBadRequest {
			t.Errorf("update %v: %d %v, want 400", bad, code, refused)
		}
	}
	if q2, err := ac.GetQueue(ctx, "plain", nil); err != nil || *q2.LockDuration != "PT30S" || *q2.Status != admin.EntityStatusSendDisabled {
		t.Fatalf("a refused edit changed the queue: %+v %v", q2, err)
	}
}

// waitRoutable waits until the front-end's routing table names queue.
func waitRoutable(t *testing.T, c *cluster.Dev, queue string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Router.Entity(queue); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s never reached the front-end's routing table", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConsoleResendOne: the console's "resend" of one dead-lettered
// message (a re-drive naming its sequence number) moves that message
// and no other back to its queue, where the SDK receives it; resending
// it again, or a number that names nothing, moves nothing. On a plain
// and a partitioned queue (where the number names the partition).
func TestConsoleResendOne(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc := newConsoleClient(t, c)
	var e map[string]any
	if code := cc.post("signin", map[string]string{"keyName": sas.DevKeyName, "key": sas.DevKey}, &e); code != http.StatusOK {
		t.Fatalf("sign-in: %d %v", code, e)
	}
	for _, tc := range []struct {
		name        string
		partitioned bool
	}{{"one", false}, {"many", true}} {
		if _, err := ac.CreateQueue(ctx, tc.name, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{EnablePartitioning: to.Ptr(tc.partitioned)}}); err != nil {
			t.Fatal(err)
		}
		waitRoutable(t, c, tc.name)
		deadLetterAll(t, ctx, client, tc.name, 6)
		var msgs []struct {
			SequenceNumber uint64 `json:"sequenceNumber"`
			Body           string `json:"body"`
		}
		if code := cc.get("messages?dlq=1&name="+tc.name, &msgs); code != http.StatusOK || len(msgs) != 6 {
			t.Fatalf("%s: peek of the dead-letter queue: %d, %d messages", tc.name, code, len(msgs))
		}
		pick := msgs[3]
		var moved map[string]int
		if code := cc.post("redrive", map[string]any{"name": tc.name, "sequence": []uint64{pick.SequenceNumber}}, &moved); code != http.StatusOK || moved["moved"] != 1 {
			t.Fatalf("%s: resend of %d: %d %v", tc.name, pick.SequenceNumber, code, moved)
		}
		if got := receiveCompleted(t, ctx, client, tc.name, 1); len(got) != 1 || got[0] != pick.Body {
			t.Fatalf("%s: received %v after resending %q", tc.name, got, pick.Body)
		}
		if a, d := runtimeCounts(t, ctx, ac, tc.name); a != 0 || d != 5 {
			t.Fatalf("%s: after resending one: active %d, dead-lettered %d; want 0 and 5", tc.name, a, d)
		}
		for _, seq := range []uint64{pick.SequenceNumber, pick.SequenceNumber + 1<<40} {
			if code := cc.post("redrive", map[string]any{"name": tc.name, "sequence": []uint64{seq}}, &moved); code != http.StatusOK || moved["moved"] != 0 {
				t.Errorf("%s: resend of %d, moved already or never there: %d %v", tc.name, seq, code, moved)
			}
		}
		var left []struct {
			SequenceNumber uint64 `json:"sequenceNumber"`
		}
		if code := cc.get("messages?dlq=1&name="+tc.name, &left); code != http.StatusOK || len(left) != 5 {
			t.Fatalf("%s: the dead-letter queue after: %d, %d messages", tc.name, code, len(left))
		}
		for _, m := range left {
			if m.SequenceNumber == pick.SequenceNumber {
				t.Errorf("%s: %d is still dead-lettered", tc.name, m.SequenceNumber)
			}
		}
	}
}
