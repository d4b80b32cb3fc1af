package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseISODuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "PT1M", want: time.Minute},
		{in: "PT20S", want: 20 * time.Second},
		{in: "PT1H", want: time.Hour},
		{in: "P14D", want: 14 * 24 * time.Hour},
		{in: "P1DT2H3M4.5S", want: 26*time.Hour + 3*time.Minute + 4500*time.Millisecond},
		{in: "P10675199DT2H48M5.4775807S", want: time.Duration(1<<63 - 1)},
		{in: "PT0.25S", want: 250 * time.Millisecond},
		{in: "1M", bad: true},
		{in: "P", bad: true},
		{in: "PT", bad: true},
		{in: "P1H", bad: true}, // hours belong after T
		{in: "PT1D", bad: true},
		{in: "PTT1S", bad: true},
		{in: "PT1", bad: true},
	} {
		got, err := ParseISODuration(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: parsed as %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestLoadEmulatorConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Config.json")
	os.WriteFile(path, []byte(`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [
		{"Name": "queue.1", "Properties": {"DeadLetteringOnMessageExpiration": true, "DefaultMessageTimeToLive": "PT1H",
		 "DuplicateDetectionHistoryTimeWindow": "PT20S", "LockDuration": "PT30S", "MaxDeliveryCount": 3,
		 "RequiresDuplicateDetection": true, "RequiresSession": false}},
		{"Name": "queue.2"}]}], "Logging": {"Type": "File"}}}`), 0o644)
	qs, err := LoadEmulatorConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "queue.1" || qs[1].Name != "queue.2" {
		t.Fatalf("queues %+v", qs)
	}
	p := qs[0].Props
	if p.LockDurationMs != 30000 || p.DefaultMessageTtlMs != 3600000 || p.DuplicateDetectionWindowMs != 20000 ||
		p.MaxDeliveryCount != 3 || !p.DeadLetteringOnMessageExpiration || !p.RequiresDuplicateDetection {
		t.Fatalf("properties %+v", p)
	}
	os.WriteFile(path, []byte(`{"UserConfig": {"Namespaces": [{"Name": "n", "Queues": [{"Name": "q", "Properties": {"LockDuration": "1 minute"}}]}]}}`), 0o644)
	if _, err := LoadEmulatorConfig(path); err == nil {
		t.Fatal("a malformed duration was accepted")
	}
}
