package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestGatewayProcess runs `quorumbus gateway` beside three storage
// processes and drives it with the Go admin client over HTTPS.
func TestGatewayProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	dir := t.TempDir()

	_, grpcAddrs, _ := startStorageProcesses(t, bin, dir)
	httpAddr := freeAddrs(t, 1)[0]
	// The gateway trusts the rules of its file besides the catalog's.
	const key = "a-key-only-this-test-knows"
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules,
		sas.Rule{Name: "Admin", Rights: sas.Listen | sas.Send | sas.Manage, PrimaryKey: key},
		sas.Rule{Name: "Reader", Rights: sas.Listen, PrimaryKey: key}); err != nil {
		t.Fatal(err)
	}
	// 50 credits a second, all the gateway's (no front-end spends them
	// here): five admin requests.
	startProcess(t, bin, "gateway", "-plain-cluster", "-http-addr", httpAddr, "-placement", strings.Join(grpcAddrs, ","),
		"-sas-rules", rules, "-log-level", "error", "-throttle-credits", "50", "-frontends", "0")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Ready once it reached the catalog.
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("gateway never ready: %s", body)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("gateway never ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The certificate is made in memory at start: this client skips its
	// check, as one that was handed no certificate must.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ac, err := admin.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=Admin;SharedAccessKey=%s", httpAddr, key),
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: insecure,
			Retry: policy.RetryOptions{MaxRetries: 10, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "gw", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{MaxDeliveryCount: to.Ptr[int32](3)}}); err != nil {
		t.Fatalf("CreateQueue through the gateway process: %v", err)
	}
	rp, err := ac.GetQueueRuntimeProperties(ctx, "gw", nil)
	if err != nil || rp == nil || rp.ActiveMessageCount != 0 || rp.CreatedAt.IsZero() {
		t.Fatalf("GetQueueRuntimeProperties = %+v, %v", rp, err)
	}
	// A list reads the counters group by group, GroupStats over gRPC.
	listed := 0
	for pager := ac.NewListQueuesRuntimePropertiesPager(nil); pager.More(); {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("listing queues through the gateway process: %v", err)
		}
		for _, q := range page.QueueRuntimeProperties {
			if q.QueueName == "gw" && q.TotalMessageCount == 0 && !q.CreatedAt.IsZero() {
				listed++
			}
		}
	}
	if listed != 1 {
		t.Fatalf("the runtime list has gw with its counts %d times, want once", listed)
	}
	q, err := ac.GetQueue(ctx, "gw", nil)
	if err != nil || q == nil || *q.MaxDeliveryCount != 3 {
		t.Fatalf("GetQueue = %+v, %v", q, err)
	}
	wrong, err := admin.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=Admin;SharedAccessKey=not-the-key", httpAddr),
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: insecure}})
	if err != nil {
		t.Fatal(err)
	}
	var re *azcore.ResponseError
	if _, err := wrong.GetQueue(ctx, "gw", nil); !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GetQueue with a wrong key: %v, want 401", err)
	}
	// A rule without the Manage right manages nothing, reads included.
	reader, err := admin.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=Reader;SharedAccessKey=%s", httpAddr, key),
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: insecure}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.GetQueue(ctx, "gw", nil); !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized || !strings.Contains(err.Error(), "Manage") {
		t.Fatalf("GetQueue with a Listen rule: %v, want 401 naming Manage", err)
	}

	// Past its credits the gateway answers 503, which the client's
	// default retry policy retries to success (up to fifteen requests
	// fit: adminthrottle_test.go in tests/compat tells why; twelve make
	// some wait however the seconds fall), and its /metrics counts the
	// throttled requests.
	sdk, err := admin.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=Admin;SharedAccessKey=%s", httpAddr, key),
		&admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: insecure}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 12)
	for range 12 {
		go func() {
			_, err := sdk.GetQueue(ctx, "gw", nil)
			errs <- err
		}()
	}
	for range 12 {
		if err := <-errs; err != nil {
			t.Fatalf("a throttled GetQueue was not retried to success: %v", err)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `quorumbus_throttled_requests_total{entity="gw"}`) {
		t.Fatalf("/metrics counts no throttled request of gw:\n%s", metrics)
	}
}
