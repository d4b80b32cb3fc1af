package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// KEDA's azure-servicebus scaler reads a queue's length with the Go admin
// client built from a connection string and no options: GetQueueRuntimeProperties
// and its ActiveMessageCount, or, with useRegex, every queue's runtime
// properties through the pager, summing those whose names match. The
// helper process makes exactly those calls, trusting the dev certificate
// the way a user of an unmodified client does: through the system's
// trust store (SSL_CERT_FILE).

// TestKEDAScalerCalls sends 3 messages to one queue and 2 to another and
// has the helper read the lengths as KEDA does.
func TestKEDAScalerCalls(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := devClient(t, c)
	for name, n := range map[string]int{"orders-eu": 3, "orders-us": 2} {
		if _, err := ac.CreateQueue(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		sender, err := client.NewSender(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		sender.Close(ctx)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKEDAHelperProcess$")
	cmd.Env = append(os.Environ(),
		"QUORUMBUS_KEDA_HELPER=1",
		"SSL_CERT_FILE="+c.AdminCert,
		fmt.Sprintf("QUORUMBUS_KEDA_CONN=Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", c.Admin.Addr(), sas.DevKeyName, sas.DevKey),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, want := range []string{"queue orders-eu: 3", "regex orders-.*: 5"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper said %q; want %q in it", out, want)
		}
	}
}

// TestKEDAHelperProcess is the helper: it runs only when
// TestKEDAScalerCalls starts it.
func TestKEDAHelperProcess(t *testing.T) {
	if os.Getenv("QUORUMBUS_KEDA_HELPER") != "1" {
		t.Skip("run by TestKEDAScalerCalls")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As KEDA: no client options, so the system's trust store decides.
	ac, err := admin.NewClientFromConnectionString(os.Getenv("QUORUMBUS_KEDA_CONN"), nil)
	if err != nil {
		t.Fatal(err)
	}
	props, err := ac.GetQueueRuntimeProperties(ctx, "orders-eu", nil)
	if err != nil || props == nil {
		t.Fatalf("GetQueueRuntimeProperties: %v, %v", props, err)
	}
	fmt.Printf("queue orders-eu: %d\n", props.ActiveMessageCount)
	re := regexp.MustCompile("^orders-.*$")
	var total int64
	pager := ac.NewListQueuesRuntimePropertiesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.QueueRuntimeProperties {
			if re.MatchString(q.QueueName) {
				total += int64(q.ActiveMessageCount)
			}
		}
	}
	fmt.Printf("regex orders-.*: %d\n", total)
}
