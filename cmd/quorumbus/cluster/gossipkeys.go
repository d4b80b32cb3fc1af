package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// maxGossipKeyFile bounds what ParseGossipKeys reads: a handful of keys.
const maxGossipKeyFile = 4 << 10

// ParseGossipKeys reads a gossip key file: one base64 key per line (16, 24
// or 32 bytes once decoded; `openssl rand -base64 32` makes one), the first
// the one gossip is encrypted with, the others accepted too (a rotation);
// blank lines and lines starting with # are skipped.
func ParseGossipKeys(data []byte) ([][]byte, error) {
	if len(data) > maxGossipKeyFile {
		return nil, fmt.Errorf("gossip key file: larger than %d bytes", maxGossipKeyFile)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("gossip key file, line %d: not base64", i+1)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("gossip key file, line %d: a key of %d bytes, want 16, 24 or 32", i+1, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip key file: no key")
	}
	return keys, nil
}

// LoadGossipKeys reads and parses a gossip key file.
func LoadGossipKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseGossipKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// WatchGossipKeys re-reads the key file every interval until ctx ends and
// hands set the keys when the file changed; a file that does not parse is
// logged and the keys in use stay. Keys never appear in logs.
func WatchGossipKeys(ctx context.Context, path string, interval time.Duration, set func([][]byte) error, log *slog.Logger) {
	last, _ := os.ReadFile(path)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(path)
		if err != nil || bytes.Equal(data, last) {
			continue
		}
		keys, err := ParseGossipKeys(data)
		if err != nil {
			log.Warn("gossip key file changed but does not parse; the keys in use stay", "file", path, "err", err)
			continue
		}
		if err := set(keys); err != nil {
			log.Warn("gossip keys not changed", "file", path, "err", err)
			continue
		}
		last = data
		log.Info("gossip keys reloaded", "file", path, "keys", len(keys))
	}
}
