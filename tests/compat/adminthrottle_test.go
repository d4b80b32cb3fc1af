package compat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAdminThrottledBurst: a dev cluster at 40 credits a second, so four
// management operations of 10; a burst of ten concurrent creates from
// the Go admin client with its default retry policy (azcore: 3 retries
// of 503, 0.8 s doubling, jittered) is slowed by 503s with Service Bus's
// throttling words, retried, and every create succeeds; the throttled
// counter of /metrics moved for the burst's queues.
//
// Why ten always fit: a request's four tries span at least three
// different seconds (the third comes 2.56 s or more after the first, the
// fourth 4.48 s or more after the third), so a request that failed them
// all met three seconds of four passes each: twelve others.
func TestAdminThrottledBurst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir:         t.TempDir(),
		AMQPAddr:        "127.0.0.1:0",
		HTTPAddr:        "127.0.0.1:0",
		Nodes:           3,
		Groups:          3,
		CacheMB:         16,
		LogLevel:        "error",
		ThrottleCredits: 40,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	// The patient client of the other admin tests waits out the meta
	// group's first election.
	patient := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	if _, err := patient.GetQueue(ctx, "warm-up", nil); err != nil {
		t.Fatalf("the admin API never answered: %v", err)
	}
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey)
	sdk, err := admin.NewClientFromConnectionString(conn, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: trustingClient(t, c)}})
	if err != nil {
		t.Fatal(err)
	}

	// The raw refusal first: four operations a second, the fifth refused.
	raw, err := admin.NewClientFromConnectionString(conn, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: trustingClient(t, c), Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	var refusal error
	for i := 0; i < 10 && refusal == nil; i++ {
		_, refusal = raw.GetQueue(ctx, "raw", nil)
	}
	if responseStatus(refusal) != 503 || !strings.Contains(refusal.Error(),
		"The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again.") {
		t.Fatalf("past the credits: %v, want 503 in Service Bus's words", refusal)
	}

	const burst = 10
	freshSecond()
	var wg sync.WaitGroup
	errs := make([]error, burst)
	for i := range burst {
		wg.Go(func() {
			_, errs[i] = sdk.CreateQueue(ctx, fmt.Sprint("burst-", i), nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create burst-%d was not retried to success: %v", i, err)
		}
	}
	fams := scrape(t, c.Admin.Addr())
	throttled := 0.0
	for i := range burst {
		n, _ := value(fams, "quorumbus_throttled_requests_total", map[string]string{"entity": fmt.Sprint("burst-", i)})
		throttled += n
	}
	t.Logf("%v tries of the burst throttled", throttled)
	if throttled < burst-4 {
		t.Errorf("quorumbus_throttled_requests_total of the burst's queues: %v, want at least %d", throttled, burst-4)
	}
	if n, _ := value(fams, "quorumbus_throttled_requests_total", map[string]string{"entity": "raw"}); n != 1 {
		t.Errorf("quorumbus_throttled_requests_total{entity=raw} = %v, want 1", n)
	}
	for i := range burst {
		q, err := patient.GetQueue(ctx, fmt.Sprint("burst-", i), nil)
		if err != nil || q == nil {
			t.Errorf("burst-%d after the burst: %+v, %v", i, q, err)
		}
	}
}

// freshSecond sleeps into the start of a second of its own, so that a
// burst spends one second's credits.
func freshSecond() {
	next := time.Unix(time.Now().Unix()+1, 0)
	time.Sleep(time.Until(next) + 10*time.Millisecond)
}
