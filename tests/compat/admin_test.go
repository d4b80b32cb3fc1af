package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// These tests drive the management API with the official Go admin client
// over HTTPS, against a dev cluster with its HTTP listener (which serves
// the gateway), as a user of `quorumbus dev` would.

func startAdminDev(t testing.TB) *cluster.Dev {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir:  t.TempDir(),
		AMQPAddr: "127.0.0.1:0",
		HTTPAddr: "127.0.0.1:0",
		Nodes:    3,
		Groups:   3,
		CacheMB:  16,
		LogLevel: "error",
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
	})
	return c
}

// trustingClient is an HTTP client that trusts the dev cluster's
// self-signed certificate, as a user who added it to their trust store.
func trustingClient(t testing.TB, c *cluster.Dev) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(c.AdminCert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("no certificate in", c.AdminCert)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
}

func adminClient(t testing.TB, c *cluster.Dev, keyName, key string) *admin.Client {
	t.Helper()
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), keyName, key)
	client, err := admin.NewClientFromConnectionString(conn, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: trustingClient(t, c),
		// A create right after the cluster starts may meet a meta
		// group still electing: 503, which the client retries.
		Retry: policy.RetryOptions{MaxRetries: 8, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func responseStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func TestAdminQueueLifecycle(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	created, err := ac.CreateQueue(ctx, "orders", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		LockDuration:     to.Ptr("PT30S"),
		MaxDeliveryCount: to.Ptr[int32](5),
		RequiresSession:  to.Ptr(true),
	}})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	if got := *created.LockDuration; got != "PT30S" {
		t.Errorf("created LockDuration = %s, want PT30S", got)
	}
	if *created.MaxDeliveryCount != 5 || !*created.RequiresSession || *created.EnablePartitioning {
		t.Errorf("created = %+v", created.QueueProperties)
	}
	if got := *created.DefaultMessageTimeToLive; got != "P10675199DT2H48M5.4775807S" {
		t.Errorf("default TTL = %s, want forever", got)
	}

	if _, err := ac.CreateQueue(ctx, "ORDERS", nil); responseStatus(err) != http.StatusConflict {
		t.Fatalf("CreateQueue of a name differing in case: %v, want 409 (names are case-insensitive)", err)
	}
	if _, err := ac.CreateQueue(ctx, "bad-", nil); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("CreateQueue with an invalid name: %v, want 400", err)
	}
	if _, err := ac.CreateQueue(ctx, "slow", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{LockDuration: to.Ptr("PT6M")}}); responseStatus(err) != http.StatusBadRequest {
		t.Fatalf("CreateQueue with a lock over 5 minutes: %v, want 400", err)
	}
	if _, err := ac.CreateQueue(ctx, "orders", nil); responseStatus(err) != http.StatusConflict {
		t.Fatalf("second CreateQueue: %v, want 409", err)
	}

	got, err := ac.GetQueue(ctx, "orders", nil)
	if err != nil || got == nil {
		t.Fatalf("GetQueue: %v, %v", got, err)
	}
	if *got.MaxDeliveryCount != 5 || *got.LockDuration != "PT30S" || *got.Status != admin.EntityStatusActive {
		t.Errorf("GetQueue = %+v", got.QueueProperties)
	}
	if missing, err := ac.GetQueue(ctx, "missing", nil); err != nil || missing != nil {
		t.Fatalf("GetQueue(missing) = %v, %v; want nil, nil", missing, err)
	}

	// Update what a user changes: the properties read back, modified.
	props := got.QueueProperties
	props.MaxDeliveryCount = to.Ptr[int32](8)
	props.LockDuration = to.Ptr("PT2M")
	props.Status = to.Ptr(admin.EntityStatusSendDisabled)
	props.UserMetadata = to.Ptr("owner=payments")
	updated, err := ac.UpdateQueue(ctx, "orders", props, nil)
	if err != nil {
		t.Fatalf("UpdateQueue: %v", err)
	}
	if *updated.MaxDeliveryCount != 8 || *updated.LockDuration != "PT2M" || *updated.Status != admin.EntityStatusSendDisabled {
		t.Errorf("UpdateQueue = %+v", updated.QueueProperties)
	}
	got, err = ac.GetQueue(ctx, "orders", nil)
	if err != nil || *got.MaxDeliveryCount != 8 || !*got.RequiresSession || got.UserMetadata == nil || *got.UserMetadata != "owner=payments" {
		t.Fatalf("GetQueue after update: %+v, %v", got, err)
	}

	// Properties fixed at creation, and ones quorumbus cannot honour, are
	// refused with 400 and a reason, never dropped.
	for _, tc := range []struct {
		name   string
		change func(p *admin.QueueProperties)
		reason string
	}{
		{"RequiresSession", func(p *admin.QueueProperties) { p.RequiresSession = to.Ptr(false) }, "RequiresSession"},
		{"EnablePartitioning", func(p *admin.QueueProperties) { p.EnablePartitioning = to.Ptr(true) }, "EnablePartitioning"},
		{"ForwardTo itself", func(p *admin.QueueProperties) { p.ForwardTo = to.Ptr("orders") }, "forwards to itself"},
		{"LockDuration", func(p *admin.QueueProperties) { p.LockDuration = to.Ptr("PT10M") }, "lock duration"},
		{"AutoDeleteOnIdle", func(p *admin.QueueProperties) { p.AutoDeleteOnIdle = to.Ptr("PT1H") }, "AutoDeleteOnIdle"},
	} {
		p := got.QueueProperties
		tc.change(&p)
		_, err := ac.UpdateQueue(ctx, "orders", p, nil)
		if responseStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("update of %s: %v; want 400 naming %q", tc.name, err, tc.reason)
		}
	}
	if _, err := ac.UpdateQueue(ctx, "missing", got.QueueProperties, nil); responseStatus(err) != http.StatusNotFound {
		t.Errorf("UpdateQueue(missing): %v, want 404", err)
	}

	if _, err := ac.DeleteQueue(ctx, "orders", nil); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if gone, err := ac.GetQueue(ctx, "orders", nil); err != nil || gone != nil {
		t.Fatalf("GetQueue after delete = %v, %v; want nil, nil", gone, err)
	}
	if _, err := ac.DeleteQueue(ctx, "orders", nil); responseStatus(err) != http.StatusNotFound {
		t.Fatalf("second DeleteQueue: %v, want 404", err)
	}

	ns, err := ac.GetNamespaceProperties(ctx, nil)
	if err != nil || ns.Name != "quorumbus" || ns.SKU != "Standard" {
		t.Fatalf("GetNamespaceProperties = %+v, %v", ns, err)
	}
}

func TestAdminListQueuesInPages(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var want []string
	for i := range 5 {
		name := fmt.Sprintf("q%d", i)
		var opts *admin.CreateQueueOptions
		if i == 1 {
			opts = &admin.CreateQueueOptions{Properties: &admin.QueueProperties{LockDuration: to.Ptr("PT45S"),
				MaxDeliveryCount: to.Ptr[int32](4), RequiresSession: to.Ptr(true), UserMetadata: to.Ptr("m"),
				DefaultMessageTimeToLive: to.Ptr("PT1H"), DeadLetteringOnMessageExpiration: to.Ptr(true)}}
		}
		if _, err := ac.CreateQueue(ctx, name, opts); err != nil {
			t.Fatalf("CreateQueue %s: %v", name, err)
		}
		want = append(want, name)
	}
	var names []string
	pages := 0
	pager := ac.NewListQueuesPager(&admin.ListQueuesOptions{MaxPageSize: 2})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Queues) > 0 {
			pages++
		}
		for _, q := range page.Queues {
			names = append(names, q.QueueName)
			// A feed's entries carry less than an entry answered
			// alone; the properties read from them are the same.
			got, err := ac.GetQueue(ctx, q.QueueName, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(q.QueueProperties, got.QueueProperties) {
				listed, _ := json.Marshal(q.QueueProperties)
				alone, _ := json.Marshal(got.QueueProperties)
				t.Errorf("%s listed as %s, got as %s", q.QueueName, listed, alone)
			}
		}
	}
	if !slices.Equal(names, want) || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", names, pages, want)
	}
	var rtNames []string
	rt := ac.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: 3})
	for rt.More() {
		page, err := rt.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.QueueRuntimeProperties {
			rtNames = append(rtNames, q.QueueName)
			if q.CreatedAt.IsZero() {
				t.Errorf("%s has no CreatedAt", q.QueueName)
			}
		}
	}
	if !slices.Equal(rtNames, want) {
		t.Fatalf("runtime list %v, want %v", rtNames, want)
	}
}

func TestAdminRuntimeCounts(t *testing.T) {
	t.Parallel()
	started := time.Now()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, q := range []struct {
		name        string
		partitioned bool
	}{{"plain", false}, {"parted", true}} {
		if _, err := ac.CreateQueue(ctx, q.name, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{EnablePartitioning: to.Ptr(q.partitioned)}}); err != nil {
			t.Fatalf("CreateQueue %s: %v", q.name, err)
		}
	}
	client := devClient(t, c)
	for _, name := range []string{"plain", "parted"} {
		sender, err := client.NewSender(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprintf("m%d", i))}, nil); err != nil {
				t.Fatalf("send to %s: %v", name, err)
			}
		}
		if _, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}, {Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatalf("schedule on %s: %v", name, err)
		}
		sender.Close(ctx)
		receiver, err := client.NewReceiverForQueue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive from %s: %d messages, %v", name, len(msgs), err)
		}
		if err := receiver.DeadLetterMessage(ctx, msgs[0], nil); err != nil {
			t.Fatalf("dead-letter on %s: %v", name, err)
		}
		receiver.Close(ctx)

		var rp *admin.GetQueueRuntimePropertiesResponse
		deadline := time.Now().Add(10 * time.Second)
		for {
			rp, err = ac.GetQueueRuntimeProperties(ctx, name, nil)
			if err != nil {
				t.Fatalf("GetQueueRuntimeProperties %s: %v", name, err)
			}
			if rp.ActiveMessageCount == 4 && rp.DeadLetterMessageCount == 1 && rp.ScheduledMessageCount == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		r := rp.QueueRuntimeProperties
		if r.ActiveMessageCount != 4 || r.DeadLetterMessageCount != 1 || r.ScheduledMessageCount != 2 ||
			r.TotalMessageCount != 7 || r.TransferMessageCount != 0 || r.TransferDeadLetterMessageCount != 0 {
			t.Errorf("%s counts = %+v; want 4 active, 1 dead-lettered, 2 scheduled, 7 in all", name, r)
		}
		if r.SizeInBytes <= 0 || r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() {
			t.Errorf("%s: size %d, created %v, updated %v", name, r.SizeInBytes, r.CreatedAt, r.UpdatedAt)
		}
		// AccessedAt: the last send or receive, by the leader's clock
		// (this machine's; a minute of slack for a slow apply).
		if r.AccessedAt.Before(started.Add(-time.Minute)) || r.AccessedAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("%s: accessed at %v, want between %v and now", name, r.AccessedAt, started)
		}
	}
	// A queue nobody sent to or received from was never accessed.
	if _, err := ac.CreateQueue(ctx, "idle", nil); err != nil {
		t.Fatal(err)
	}
	idle, err := ac.GetQueueRuntimeProperties(ctx, "idle", nil)
	if err != nil || idle == nil {
		t.Fatalf("GetQueueRuntimeProperties idle: %v, %v", idle, err)
	}
	if !idle.AccessedAt.IsZero() {
		t.Errorf("idle: accessed at %v, want never", idle.AccessedAt)
	}
	// The list reads the counters group by group (GroupStats), not
	// entity by entity: the same figures.
	listed := map[string]admin.QueueRuntimeProperties{}
	for pager := ac.NewListQueuesRuntimePropertiesPager(&admin.ListQueuesRuntimePropertiesOptions{MaxPageSize: 2}); pager.More(); {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.QueueRuntimeProperties {
			listed[q.QueueName] = q.QueueRuntimeProperties
		}
	}
	for _, name := range []string{"plain", "parted"} {
		r := listed[name]
		if r.ActiveMessageCount != 4 || r.DeadLetterMessageCount != 1 || r.ScheduledMessageCount != 2 || r.SizeInBytes <= 0 || r.AccessedAt.IsZero() {
			t.Errorf("listed %s: %+v; want 4 active, 1 dead-lettered, 2 scheduled, a size and an access time", name, r)
		}
	}
	if r, ok := listed["idle"]; !ok || r.TotalMessageCount != 0 || !r.AccessedAt.IsZero() {
		t.Errorf("listed idle: %+v (listed %v)", r, ok)
	}
}

func TestAdminRefusesWithoutManageKey(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrong := adminClient(t, c, sas.DevKeyName, "not-the-key")
	if _, err := wrong.CreateQueue(ctx, "q", nil); responseStatus(err) != http.StatusUnauthorized {
		t.Fatalf("CreateQueue with a wrong key: %v, want 401", err)
	}
	other := adminClient(t, c, "SomeoneElse", sas.DevKey)
	if _, err := other.GetQueue(ctx, "q", nil); responseStatus(err) != http.StatusUnauthorized {
		t.Fatalf("GetQueue with an unknown rule: %v, want 401", err)
	}

	// Plain HTTP on the same port, as the .NET client speaks in emulator
	// mode: no token is 401, a token signed with the key is served.
	u := "http://" + c.Admin.Addr() + "/$namespaceinfo?api-version=2024-05"
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token over HTTP: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", signSAS(u, sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<NamespaceInfo") {
		t.Fatalf("signed request over HTTP: %d %s", resp.StatusCode, body)
	}
	// Liveness on the same listener still answers without a token.
	resp, err = http.Get("http://" + c.Admin.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
}

// signSAS signs a token as the SDKs do.
func signSAS(uri, keyName, key string, expiry time.Time) string {
	return sas.Sign(keyName, key, uri, expiry)
}

// TestJSAdminClient drives the management API with the official
// JavaScript admin client (tests/compat/js/admin.mjs), trusting the dev
// cluster's certificate through NODE_EXTRA_CA_CERTS.
func TestJSAdminClient(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startAdminDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey)
	cmd := exec.CommandContext(ctx, "node", "admin.mjs", conn, cluster.ConnectionString(c.AMQPAddr))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+c.AdminCert)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript admin script failed: %v", err)
	}
}
