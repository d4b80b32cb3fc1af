package partition_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The command sequences that can meet around a machine crash while a
// session receiver completes a message (docs/reliability.md, "A session
// message stranded after two machine crashes"): a receiver holds session
// s and two of its messages, m1 and m2; its complete of m1 is in flight
// when the leader dies. The complete may be applied before the locks run
// out (it was committed before the crash) or after (it was proposed
// again); its retry, under the same request id, may come before or after
// the timers (ExpireLocks, ExpireSessionLocks), the next holder's accept,
// and the old holder's receive, in any order. Whatever the order, the
// next holder must get every message that was not completed, in order,
// and the complete and its retry must give the same answer.
//
// Every sixth order is also replayed with the replica restarted at a cut
// (its store closed and opened again, then the whole log applied again,
// as Raft replays it: the entries the store holds are skipped) and with a
// replica that restores a snapshot taken at another cut. Both must answer
// every entry after the cut as the uninterrupted replica did and end with
// the same store.

// crashLockMs is the session queue's lock duration.
const crashLockMs = 10_000

// crashEvent is one command that may follow the held session.
type crashEvent byte

const (
	evComplete     crashEvent = 'C' // the holder's complete of m1, request id X
	evRetry        crashEvent = 'R' // the front-end's retry: the same command, the same id
	evExpireLocks  crashEvent = 'L' // ExpireLocks
	evExpireSess   crashEvent = 'S' // ExpireSessionLocks
	evAcceptNext   crashEvent = 'A' // another receiver accepts s
	evHolderLock   crashEvent = 'H' // the old holder's receiver asks for more
	crashSessionID            = "s"
)

// crashOrders returns the orders of the events: the complete before its
// retry and the next holder's accept in any order; each timer absent (its
// leader had not proposed it yet) or at any place; and the old holder's
// receive at a place that moves from order to order (every place for
// every order would be six times as many stores to open).
func crashOrders() [][]crashEvent {
	var out [][]crashEvent
	var perm func(prefix, rest []crashEvent)
	perm = func(prefix, rest []crashEvent) {
		if len(rest) == 0 {
			if slices.Index(prefix, evComplete) < slices.Index(prefix, evRetry) {
				out = append(out, slices.Clone(prefix))
			}
			return
		}
		for i, e := range rest {
			perm(append(prefix, e), append(slices.Clone(rest[:i]), rest[i+1:]...))
		}
	}
	perm(nil, []crashEvent{evComplete, evRetry, evAcceptNext})
	// placed returns the orders with ev absent or at each place.
	placed := func(orders [][]crashEvent, ev crashEvent) [][]crashEvent {
		var out [][]crashEvent
		for _, o := range orders {
			out = append(out, o)
			for at := range len(o) + 1 {
				out = append(out, slices.Insert(slices.Clone(o), at, ev))
			}
		}
		return out
	}
	out = placed(placed(out, evExpireLocks), evExpireSess)
	for i, o := range out {
		out[i] = slices.Insert(o, i%(len(o)+1), evHolderLock)
	}
	return out
}

// crashRun is one order's log and what the uninterrupted replica answered.
type crashRun struct {
	entries []partition.Entry
	results [][]*partitionpb.Result
	snap    []byte
}

func TestSessionCompleteAroundLockExpiry(t *testing.T) {
	skipUnderRace(t)
	runs, want := 0, 0
	for _, order := range crashOrders() {
		want++
		if order[0] == evComplete {
			want++
		}
		for _, early := range []bool{true, false} {
			if early && order[0] != evComplete {
				continue // an early complete is applied before anything else
			}
			name := fmt.Sprintf("%s/early=%v", string(order), early)
			variants := runs%6 == 0
			runs++
			t.Run(name, func(t *testing.T) { crashOrder(t, order, early, variants, runs) })
		}
	}
	if runs != want || runs < 90 {
		t.Fatalf("%d orders ran, want %d", runs, want)
	}
}

// crashOrder runs one order, and with variants its restart and restore
// at cuts that move with n.
func crashOrder(t *testing.T, order []crashEvent, early, variants bool, n int) {
	tokenA, tokenB := pt.SessionToken(1), pt.SessionToken(2)
	requestID := []byte("complete-m1-retried")
	var run crashRun
	d := pt.NewDriver(t, 1_000)
	do := func(c *partitionpb.Command) *partitionpb.Result {
		t.Helper()
		r := d.Do(c)
		run.results = append(run.results, []*partitionpb.Result{r})
		return r
	}
	ok := func(c *partitionpb.Command) *partitionpb.Result {
		t.Helper()
		r := do(c)
		wantCode(t, fmt.Sprint(c), r, partitionpb.ResultCode_RESULT_OK)
		return r
	}
	cfg := pt.SessionQueue(1, 0, "sq")
	cfg.LockDurationMs = crashLockMs
	ok(pt.Upsert(cfg))
	ok(pt.Enqueue(1, 0, sessionMsgs(crashSessionID, "m1", "m2", "m3")...))
	acc := ok(pt.Accept(1, 0, crashSessionID, tokenA))
	until := acc.LockedUntilMs[0]
	held := ok(pt.LockSession(1, 0, crashSessionID, tokenA, 2, 1))
	if got := bodies(held); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("the holder got %v", got)
	}
	completeM1 := pt.Settle(1, 0, main, complete, held.Messages[0].LockToken)
	completeM1.RequestId = requestID
	var answers []*partitionpb.Result // of the complete and its retry
	for i, ev := range order {
		d.Now = until + int64(100*i) // every timer is due
		if ev == evComplete && early {
			d.Now = until - 5_000
		}
		switch ev {
		case evComplete, evRetry:
			answers = append(answers, do(proto.Clone(completeM1).(*partitionpb.Command)))
		case evExpireLocks:
			ok(pt.ExpireLocks())
		case evExpireSess:
			ok(pt.ExpireSessionLocks())
		case evAcceptNext:
			ok(pt.Accept(1, 0, crashSessionID, tokenB))
		case evHolderLock:
			wantCode(t, "the old holder's receive", do(pt.LockSession(1, 0, crashSessionID, tokenA, 5, 3)), codeSessionLost)
		}
	}
	want := codeLost
	if early {
		want = partitionpb.ResultCode_RESULT_OK
	}
	for i, r := range answers {
		wantCode(t, fmt.Sprintf("complete attempt %d", i+1), r, want)
	}
	// The next holder (again, if it accepted already: its
	// repeated accept finds the lock its own) gets what is left.
	d.Now += 1_000
	ok(pt.Accept(1, 0, crashSessionID, tokenB))
	next := ok(pt.LockSession(1, 0, crashSessionID, tokenB, 10, 2))
	wantBodies, wantCounts := []string{"m1", "m2", "m3"}, []uint32{1, 1, 0}
	if early {
		wantBodies, wantCounts = wantBodies[1:], wantCounts[1:]
	}
	var counts []uint32
	for _, m := range next.Messages {
		counts = append(counts, m.DeliveryCount)
	}
	if got := bodies(next); !slices.Equal(got, wantBodies) || !slices.Equal(counts, wantCounts) {
		t.Fatalf("the next holder got %v with delivery counts %v, want %v with %v", got, counts, wantBodies, wantCounts)
	}
	if err := partition.CheckSessions(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	run.entries, run.snap = d.Entries, snapshotBytes(t, d.M)
	if !variants {
		return
	}
	// Restarts and restores at cuts spread over the orders, after
	// the held session at the earliest.
	span := len(run.entries) - 4
	checkRestart(t, run, 4+n%span)
	checkRestore(t, run, 4+(n*3+1)%span)
}

// checkRestart applies run's log up to cut, closes the store, opens it
// again and applies the whole log again.
func checkRestart(t *testing.T, run crashRun, cut int) {
	t.Helper()
	dir := t.TempDir()
	m, err := partition.Open(dir, pt.Options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(run.entries[:cut]); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = pt.OpenDir(t, dir)
	from := m.AppliedIndex()
	for i, e := range run.entries {
		res, err := m.Apply([]partition.Entry{e})
		if err != nil {
			t.Fatalf("restarted at %d: entry %d: %v", cut, e.Index, err)
		}
		if e.Index <= from {
			if res[0] != nil {
				t.Fatalf("restarted at %d: entry %d, which the store holds, was applied again", cut, e.Index)
			}
			continue
		}
		sameEntryResults(t, fmt.Sprintf("restarted at %d: entry %d", cut, e.Index), res[0], run.results[i])
	}
	if !bytes.Equal(snapshotBytes(t, m), run.snap) {
		t.Fatalf("restarted at %d: the store differs from the uninterrupted replica's", cut)
	}
}

// checkRestore applies run's log up to cut, restores a snapshot of it on
// another replica, and applies the rest there.
func checkRestore(t *testing.T, run crashRun, cut int) {
	t.Helper()
	a := pt.Open(t)
	if _, err := a.Apply(run.entries[:cut]); err != nil {
		t.Fatal(err)
	}
	b := pt.Open(t)
	if err := b.Restore(bytes.NewReader(snapshotBytes(t, a))); err != nil {
		t.Fatal(err)
	}
	for i, e := range run.entries[cut:] {
		res, err := b.Apply([]partition.Entry{e})
		if err != nil {
			t.Fatalf("restored at %d: entry %d: %v", cut, e.Index, err)
		}
		sameEntryResults(t, fmt.Sprintf("restored at %d: entry %d", cut, e.Index), res[0], run.results[cut+i])
	}
	if !bytes.Equal(snapshotBytes(t, b), run.snap) {
		t.Fatalf("restored at %d: the store differs from the uninterrupted replica's", cut)
	}
}

func sameEntryResults(t *testing.T, what string, got, want []*partitionpb.Result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: result %d:\n%v\nwant\n%v", what, i, strings.TrimSpace(got[i].String()), strings.TrimSpace(want[i].String()))
		}
	}
}
