package cluster

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// TestRaftMetrics: once collecting, a timer that hashicorp/raft reports
// through go-metrics is served at /debug/raft-metrics with its count.
func TestRaftMetrics(t *testing.T) {
	h := collectRaftMetrics()
	metrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/debug/raft-metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var summary struct {
		Samples []struct {
			Name  string
			Count int
			Mean  float64
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &summary); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	for _, s := range summary.Samples {
		if s.Name == "quorumbus.raft.commitTime" {
			if s.Count != 1 || s.Mean < 3 {
				t.Fatalf("commitTime: count %d, mean %.3f ms; want 1 sample of at least 3 ms", s.Count, s.Mean)
			}
			return
		}
	}
	t.Fatalf("no quorumbus.raft.commitTime in %s", rec.Body)
}
