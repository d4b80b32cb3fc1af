package compat

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAdminPartitionedEntityLimit: a namespace holds 100 partitioned
// entities (queues and topics); the Go admin client creates them, and the
// 101st, queue or topic, is refused with 403 in Azure's words (SubCode
// 40300, which the SDKs report as QuotaExceeded), while a plain queue is still welcome and deleting
// a partitioned queue makes room for another.
func TestAdminPartitionedEntityLimit(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	partitioned := &admin.CreateQueueOptions{Properties: &admin.QueueProperties{EnablePartitioning: to.Ptr(true)}}
	const limit = 100
	start := time.Now()
	names := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				if _, err := ac.CreateQueue(ctx, fmt.Sprint("p", i), partitioned); err != nil {
					t.Errorf("partitioned queue %d of %d: %v", i+1, limit, err)
				}
			}
		}()
	}
	for i := range limit {
		names <- i
	}
	close(names)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d partitioned queues created in %v", limit, time.Since(start).Round(time.Millisecond))

	// Azure answers 403 "SubCode=40300. The maximum number of resources
	// of type EnablePartitioning == true has been reached or exceeded.
	// Actual: 100, Max allowed: 100." The .NET and Java admin clients
	// take a 403 without SubCode=40301 (invalid operation) as
	// QuotaExceeded.
	refused := func(what string, err error) {
		t.Helper()
		if responseStatus(err) != http.StatusForbidden || strings.Contains(err.Error(), "SubCode=40301") {
			t.Fatalf("%s past the limit: %v, want 403 (QuotaExceeded)", what, err)
		}
		for _, words := range []string{"SubCode=40300.", "The maximum number of resources of type EnablePartitioning == true has been reached or exceeded.", "Actual: 100, Max allowed: 100"} {
			if !strings.Contains(err.Error(), words) {
				t.Fatalf("%s past the limit: %v, want Azure's words %q", what, err, words)
			}
		}
	}
	_, err := ac.CreateQueue(ctx, "p-extra", partitioned)
	refused("a partitioned queue", err)
	_, err = ac.CreateTopic(ctx, "t-extra", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{EnablePartitioning: to.Ptr(true)}})
	refused("a partitioned topic", err)
	if _, err := ac.CreateQueue(ctx, "plain", nil); err != nil {
		t.Fatalf("a plain queue beside %d partitioned ones: %v", limit, err)
	}
	if _, err := ac.DeleteQueue(ctx, "p0", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "p-extra", partitioned); err != nil {
		t.Fatalf("a partitioned queue after one was deleted: %v", err)
	}
}
