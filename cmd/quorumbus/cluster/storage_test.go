package cluster

import (
	"testing"

	"github.com/quorumbus/quorumbus/node"
)

// TestStorageNodeConfig: the storage options in MiB reach the node's
// config in bytes, the partition leader's proposal bound (node
// -max-queued-send-mb) among them: 0 leaves the node's default,
// negative turns it off.
func TestStorageNodeConfig(t *testing.T) {
	for _, tc := range []struct {
		mb   int64
		want int64
	}{
		{0, 0}, // node.Config's default applies
		{64, node.DefaultMaxQueuedSendBytes},
		{8, 8 << 20},
		{-1, -1 << 20},
	} {
		cfg := StorageOptions{ID: "n1", DataDir: t.TempDir(), MaxQueuedSendMB: tc.mb, CacheMB: 16, DiskReserveMB: 5}.nodeConfig()
		if cfg.MaxQueuedSendBytes != tc.want {
			t.Errorf("-max-queued-send-mb %d: MaxQueuedSendBytes %d, want %d", tc.mb, cfg.MaxQueuedSendBytes, tc.want)
		}
		if (tc.mb < 0) != (cfg.MaxQueuedSendBytes < 0) {
			t.Errorf("-max-queued-send-mb %d: the bound is off: %v", tc.mb, cfg.MaxQueuedSendBytes < 0)
		}
		if cfg.CacheBytes != 16<<20 || cfg.DiskReserveBytes != 5<<20 {
			t.Errorf("cache %d, disk reserve %d bytes", cfg.CacheBytes, cfg.DiskReserveBytes)
		}
	}
}
