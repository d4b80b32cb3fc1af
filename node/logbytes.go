package node

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A log bounded in bytes, not only in entries.
//
// hashicorp/raft snapshots after SnapshotThreshold entries and then keeps
// TrailingLogs entries behind the snapshot. Both count entries, which here
// range from a few hundred bytes (a settle) to a megabyte (a staged chunk
// of a large message): 65,536 entries of chunks are 64 GiB of log on every
// replica before the first snapshot, and 4,096 behind it are 4 GiB. So
// each replica also watches the bytes its log took since its last
// snapshot and the sizes of its newest entries:
//   - once the log took Config.SnapshotLogBytes, or as much as the last
//     snapshot holds if that is more (a snapshot streams the whole store,
//     so a large backlog is not rewritten for every gigabyte of sends),
//     it takes a snapshot;
//   - it keeps TrailingLogs at the number of newest entries that hold at
//     most Config.TrailingLogBytes (never more than Config.TrailingLogs),
//     so the tail that raft keeps for lagging followers stays bounded too.
//
// The disk a group's log takes is therefore about
// max(SnapshotLogBytes, snapshot size) + TrailingLogBytes, plus raft-wal's
// preallocated segment.

// entrySizes remembers the sizes of the newest entries of a log, by index.
type entrySizes struct {
	sizes [DefaultTrailingLogs]int32
	last  uint64 // the newest index recorded; 0: none
}

func (s *entrySizes) add(index uint64, n int) {
	if index <= s.last { // the tail was replaced: forget it
		s.last = 0
	}
	s.sizes[index%uint64(len(s.sizes))] = int32(min(n, 1<<30))
	s.last = index
}

// trailing returns how many of the newest entries, at most max, hold at
// most bytes together (at least one).
func (s *entrySizes) trailing(bytes int64, max uint64) uint64 {
	max = min(max, uint64(len(s.sizes)), s.last)
	var sum int64
	k := uint64(0)
	for k < max {
		sum += int64(s.sizes[(s.last-k)%uint64(len(s.sizes))])
		if sum > bytes {
			break
		}
		k++
	}
	return k
}

// logBytesCheck is how often a replica looks at its log's bytes.
const logBytesCheck = time.Second

// watchLogBytes snapshots and bounds the tail by bytes until the group
// closes (see above).
func (g *group) watchLogBytes(snaps raft.SnapshotStore) {
	cfg := g.node.cfg
	t := time.NewTicker(logBytesCheck)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		keep := g.cache.trailing(cfg.TrailingLogBytes, cfg.TrailingLogs)
		if rc := g.raft.ReloadableConfig(); keep > 0 && differ(rc.TrailingLogs, keep) {
			rc.TrailingLogs = keep
			if err := g.raft.ReloadConfig(rc); err != nil {
				g.log.Warn("bounding the log's tail", "entries", keep, "err", err)
			}
		}
		took := g.cache.appended.Load()
		if took < cfg.SnapshotLogBytes {
			continue
		}
		// Only now read the snapshot store's metadata (a directory
		// listing and a file per snapshot), not on every tick.
		if list, err := snaps.List(); err == nil && len(list) > 0 && took < list[0].Size {
			continue
		}
		err := g.raft.Snapshot().Error()
		switch {
		case err == nil, errors.Is(err, raft.ErrNothingNewToSnapshot):
			g.cache.appended.Add(-took)
		case g.ctx.Err() == nil:
			g.log.Warn("snapshot of a log grown large", "bytes", took, "err", err)
		}
	}
}

// differ reports whether the tail length in force is off by more than a
// quarter from the wanted one: changing it costs a configuration reload.
func differ(have, want uint64) bool {
	return have < want-want/4 || have > want+want/4
}
