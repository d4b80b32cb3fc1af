package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Rule 2 of aheadlog.go: the mark a replica writes before it writes
// ahead of fsync, and how it stays out of elections after a machine
// crash may have cost it entries.

// aheadMarkKey is where a replica records, in its group's stable store,
// the last term in which it wrote ahead of fsync and the boot it did so in.
var aheadMarkKey = []byte("quorumbus/ahead-term")

// readBootID names the running kernel's boot; "" when unknown, which
// counts as a different boot.
func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

type aheadMark struct {
	term uint64
	boot string
}

func loadAheadMark(s *raftboltdb.BoltStore) (aheadMark, error) {
	v, err := s.Get(aheadMarkKey)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return aheadMark{}, nil
	}
	if err != nil {
		return aheadMark{}, err
	}
	if len(v) < 8 {
		return aheadMark{}, fmt.Errorf("ahead mark of %d bytes", len(v))
	}
	return aheadMark{term: binary.BigEndian.Uint64(v), boot: string(v[8:])}, nil
}

func storeAheadMark(s *raftboltdb.BoltStore, m aheadMark) error {
	v := binary.BigEndian.AppendUint64(nil, m.term)
	return s.Set(aheadMarkKey, append(v, m.boot...))
}

// withholding reports why this replica does not vote for a candidate
// whose last log entry is of term lastLogTerm (0: itself), or nil. While
// it may lack entries it wrote ahead as leader of term t, it votes only
// for candidates whose log has caught up past t: their log holds an entry
// of a later term's leader, and with it every entry committed in t. So a
// replica that withholds still helps elect one that has caught up; if it
// refused those too, two replicas that both once led and crashed would
// wait for each other forever.
func (l *aheadLog) withholding(lastLogTerm uint64) error {
	if t := l.withheld.Load(); t != 0 && lastLogTerm <= t {
		return fmt.Errorf("vote withheld: a machine crash may have cost this replica entries it wrote ahead of fsync as leader of term %d; it votes for candidates whose log goes past that term, and for itself once a later term's leader reaches it", t)
	}
	return nil
}

// openAheadLog opens the group's raft-wal log in dir. A replica that wrote
// ahead of fsync and restarts under the same boot first makes durable what
// the page cache holds of its log; under another boot it remembers the
// marked term for withholdIfLost.
func (g *group) openAheadLog(dir string, hlog *hclogger) (*aheadLog, error) {
	boot := g.node.cfg.host.bootID()
	mark, err := loadAheadMark(g.stable)
	if err != nil {
		return nil, err
	}
	if mark.term != 0 && boot != "" && mark.boot == boot {
		if err := syncFiles(dir); err != nil {
			return nil, fmt.Errorf("sync the log written ahead of fsync: %w", err)
		}
		if err := storeAheadMark(g.stable, aheadMark{}); err != nil {
			return nil, err
		}
		mark = aheadMark{}
	}
	l, err := openAheadLog(dir, hlog.Named("wal"), g.fail, walOptions{
		segmentBytes: g.node.cfg.WALSegmentBytes,
		host:         g.node.cfg.host,
	})
	if err != nil {
		return nil, err
	}
	l.leads = func() bool {
		r := g.raftRef.Load()
		return r != nil && r.State() == raft.Leader
	}
	l.serial = g.node.cfg.LeaderSyncFirst
	l.mark = func(term uint64) error { return storeAheadMark(g.stable, aheadMark{term: term, boot: boot}) }
	l.lostTerm = mark.term
	l.log = g.log
	l.synced = func(since time.Time) { g.observe(latencyFsync, since) }
	return l, nil
}

// withholdIfLost starts withholding this replica's vote if its log may
// have lost entries written ahead of fsync: the log was opened under
// another boot than the one it wrote ahead in, and holds no entry of a
// later term than that.
func (g *group) withholdIfLost(logs raft.LogStore, snaps raft.SnapshotStore) error {
	marked := g.ahead.lostTerm
	if marked == 0 {
		return nil
	}
	last, err := lastTerm(logs, snaps)
	if err != nil {
		return err
	}
	if last > marked {
		return nil
	}
	g.ahead.withheld.Store(marked)
	g.log.Warn("withholding votes: this replica led with its log written ahead of fsync and the machine restarted since, so entries others count on may be lost here; it votes only for candidates whose log goes past the marked term, and for itself once a later term's leader has reached it",
		"marked_term", marked, "last_log_term", last)
	return nil
}

// lastTerm is the term of the last entry in the log, or of the latest
// snapshot when the log is empty.
func lastTerm(logs raft.LogStore, snaps raft.SnapshotStore) (uint64, error) {
	idx, err := logs.LastIndex()
	if err != nil {
		return 0, err
	}
	if idx > 0 {
		var e raft.Log
		if err := logs.GetLog(idx, &e); err != nil {
			return 0, err
		}
		return e.Term, nil
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return 0, err
	}
	return list[0].Term, nil
}

// countVoters tells the log how many voters the group's newest
// configuration has: only groups of three or more write ahead of fsync.
func (g *group) countVoters() {
	if g.ahead == nil {
		return
	}
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	g.ahead.setVoters(f.Index(), n)
}
