package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

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
