package partition

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// CheckSessions checks that the session indexes of an entity partition
// agree with its messages: every available main-queue message is in its
// session's stream, every locked one among its held messages, every other
// (deferred, scheduled) among its parked ones, and no other; each record
// counts them; a session is offered (ready) exactly when
// it has available messages and no lock, and no ready entry lies below
// where accept-next's scan starts (entity.readyFloor).
func CheckSessions(m *Machine, id uint64, part uint32) error {
	msgs, err := Messages(m, id, part, partitionpb.SubQueue_SUB_QUEUE_MAIN)
	if err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{ID: id, Part: part}
	wantAvail, wantHeld, wantParked := map[string][]uint64{}, map[string][]uint64{}, map[string][]uint64{}
	for _, msg := range msgs {
		s := store.SlotOf(msg)
		switch {
		case s.Available():
			wantAvail[s.Session] = append(wantAvail[s.Session], s.Seq)
		case s.Locked:
			wantHeld[s.Session] = append(wantHeld[s.Session], s.Seq)
		default:
			wantParked[s.Session] = append(wantParked[s.Session], s.Seq)
		}
	}
	sids, err := store.ListSessions(m.db, k, 0, 1<<30, 0)
	if err != nil {
		return err
	}
	ready, err := store.PrefixIter(m.db, store.KindPrefix(k, store.KindSessionReady))
	if err != nil {
		return err
	}
	readyN := 0
	for valid := ready.First(); valid; valid = ready.Next() {
		if e := m.entities[k]; readyN == 0 && e != nil && bytes.Compare(ready.Key(), e.ready.Floor()) < 0 {
			store.CloseIter(ready, nil)
			return fmt.Errorf("ready entry %x below the scans' floor %x", ready.Key(), e.ready.Floor())
		}
		readyN++
	}
	if err := store.CloseIter(ready, ready.Error()); err != nil {
		return err
	}
	for sid := range wantAvail {
		if !slices.Contains(sids, sid) {
			sids = append(sids, sid)
		}
	}
	for sid := range wantHeld {
		if !slices.Contains(sids, sid) {
			sids = append(sids, sid)
		}
	}
	for sid := range wantParked {
		if !slices.Contains(sids, sid) {
			sids = append(sids, sid)
		}
	}
	offered := 0
	for _, sid := range sids {
		r, err := store.ReadSession(m.db, k, sid)
		if err != nil {
			return err
		}
		avail, err := store.SessionSeqs(m.db, k, store.SessionStream, sid, 0)
		if err != nil {
			return err
		}
		held, err := store.SessionSeqs(m.db, k, store.SessionHeld, sid, 0)
		if err != nil {
			return err
		}
		parked, err := store.SessionSeqs(m.db, k, store.SessionParked, sid, 0)
		if err != nil {
			return err
		}
		switch {
		case !slices.Equal(avail, wantAvail[sid]):
			return fmt.Errorf("session %q: stream %v, available messages %v", sid, avail, wantAvail[sid])
		case !slices.Equal(held, wantHeld[sid]):
			return fmt.Errorf("session %q: held %v, locked messages %v", sid, held, wantHeld[sid])
		case !slices.Equal(parked, wantParked[sid]):
			return fmt.Errorf("session %q: parked %v, deferred and scheduled messages %v", sid, parked, wantParked[sid])
		case r.Avail != int64(len(avail)) || r.Held != int64(len(held)) || r.Parked != int64(len(parked)):
			return fmt.Errorf("session %q: record counts %d/%d/%d, indexes %d/%d/%d", sid, r.Avail, r.Held, r.Parked, len(avail), len(held), len(parked))
		case r.Ready != (r.Avail > 0 && !r.Locked()):
			return fmt.Errorf("session %q: ready %v with %d available, locked %v", sid, r.Ready, r.Avail, r.Locked())
		case len(held) > 0 && !r.Locked():
			return fmt.Errorf("session %q: %d held messages without a lock", sid, len(held))
		}
		if r.Ready {
			offered++
		}
	}
	if offered != readyN {
		return fmt.Errorf("%d sessions offered, %d ready entries", offered, readyN)
	}
	return nil
}
