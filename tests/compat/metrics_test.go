package compat

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// scrape reads the dev cluster's /metrics as Prometheus would.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of a family's sample whose labels include want; ok
// is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// sum adds up a family's samples (over nodes and groups).
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	total := 0.0
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			total += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// TestMetricsAfterAKnownWorkload scrapes /metrics after sending 6
// messages, receiving 3 of them (2 completed, 1 dead-lettered) and
// scheduling 1, and checks the per-entity and per-group figures.
func TestMetricsAfterAKnownWorkload(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "Metered", &admin.CreateQueueOptions{}); err != nil {
		t.Fatal(err)
	}
	client := devClient(t, c)
	sender, err := client.NewSender("Metered", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("Metered", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []*azservicebus.ReceivedMessage
	for len(got) < 3 {
		msgs, err := receiver.ReceiveMessages(ctx, 3-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	for _, m := range got[:2] {
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := receiver.DeadLetterMessage(ctx, got[2], nil); err != nil {
		t.Fatal(err)
	}
	receiver.Close(ctx)
	sender.Close(ctx)

	q := map[string]string{"entity": "Metered"}
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(60 * time.Second)
	for {
		fams = scrape(t, c.Admin.Addr())
		active, _ := value(fams, "quorumbus_active_messages", q)
		dead, _ := value(fams, "quorumbus_dead_lettered_messages", q)
		// Groups elect on their own time after a start: wait for all.
		settled := sum(fams, "quorumbus_raft_leader") == 3 && sum(fams, "quorumbus_raft_group_healthy") == 9
		if active == 3 && dead == 1 && settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"quorumbus_active_messages", 3},
		{"quorumbus_dead_lettered_messages", 1},
		{"quorumbus_scheduled_messages", 1},
		{"quorumbus_incoming_messages_total", 6},
		{"quorumbus_outgoing_messages_total", 3},
		// 6 sends, the schedule ($management) and 3 settlements.
		{"quorumbus_incoming_requests_total", 10},
		{"quorumbus_successful_requests_total", 10},
		{"quorumbus_server_errors_total", 0},
		{"quorumbus_user_errors_total", 0},
	} {
		if v, ok := value(fams, tc.name, q); !ok || v != tc.want {
			t.Errorf("%s{entity=Metered} = %v (present %t), want %v", tc.name, v, ok, tc.want)
		}
	}
	// Dev mode does not throttle: no entity has throttled requests.
	if v, ok := value(fams, "quorumbus_throttled_requests_total", q); ok && v != 0 {
		t.Errorf("throttled requests = %v, want none", v)
	}
	if v, _ := value(fams, "quorumbus_size_bytes", q); v <= 0 {
		t.Errorf("quorumbus_size_bytes = %v, want > 0", v)
	}
	if v, _ := value(fams, "quorumbus_connections_opened_total", nil); v < 1 {
		t.Errorf("connections opened = %v", v)
	}
	// Every group has exactly one leader among the three nodes, each
	// replica knows it, and the leaders timed their commits.
	if v := sum(fams, "quorumbus_raft_leader"); v != 3 {
		t.Errorf("leaders over 3 groups = %v, want 3", v)
	}
	if v := sum(fams, "quorumbus_raft_group_healthy"); v != 9 {
		t.Errorf("healthy replicas = %v, want 9 (3 groups x 3 nodes)", v)
	}
	if v := sum(fams, "quorumbus_raft_commit_seconds"); v < 7 {
		t.Errorf("commits timed = %v, want at least one per send", v)
	}
	if v := sum(fams, "quorumbus_raft_apply_seconds"); v < 7 {
		t.Errorf("applies timed = %v", v)
	}
	if v := sum(fams, "quorumbus_raft_log_bytes_since_snapshot"); v <= 0 {
		t.Errorf("log bytes since snapshot = %v, want > 0 after the sends", v)
	}
	if v := sum(fams, "quorumbus_raft_fsync_seconds"); v < 1 {
		t.Errorf("fsyncs timed = %v", v)
	}
}
