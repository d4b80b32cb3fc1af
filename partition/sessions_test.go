package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

const (
	codeSessionLost   = partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST
	codeSessionLocked = partitionpb.ResultCode_RESULT_SESSION_CANNOT_BE_LOCKED
)

// bodies returns the bare messages of a result, as strings.
func bodies(r *partitionpb.Result) []string {
	var out []string
	for _, m := range r.Messages {
		out = append(out, string(m.Bare))
	}
	return out
}

func sessionMsgs(sid string, bodies ...string) []*partitionpb.NewMessage {
	var out []*partitionpb.NewMessage
	for _, b := range bodies {
		out = append(out, pt.SessionMsg(sid, b))
	}
	return out
}

func wantCode(t *testing.T, what string, r *partitionpb.Result, code partitionpb.ResultCode) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s: %v (%s), want %v", what, r.Code, r.Description, code)
	}
}

func TestSessionSend(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	d.OK(pt.Upsert(pt.Queue(2, 0, "q")))
	// A message without a session id is refused, and with it the whole
	// send: nothing is stored.
	r := d.Do(pt.Enqueue(1, 0, pt.SessionMsg("a", "x"), pt.Msg("no session")))
	wantCode(t, "send without session id", r, codeInvalid)
	if s := d.Stats(1, 0); s.ActiveMessages != 0 {
		t.Fatalf("a refused send stored %d messages", s.ActiveMessages)
	}
	// A session id on an entity without sessions is carried.
	d.OK(pt.Enqueue(2, 0, pt.SessionMsg("a", "x")))
	got := d.OK(pt.Lock(2, 0, main, 10, 1))
	if len(got.Messages) != 1 || got.Messages[0].SessionId != "a" {
		t.Fatalf("plain queue: got %v, want one message of session a", got.Messages)
	}
	// A session entity's main queue is received through sessions only; its
	// dead-letter queue without.
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("a", "x")))
	wantCode(t, "plain lock of a session entity", d.Do(pt.Lock(1, 0, main, 10, 1)), codeInvalid)
	wantCode(t, "accept on a plain entity", d.Do(pt.Accept(2, 0, "a", pt.SessionToken(1))), codeInvalid)
}

func TestSessionOrderAndLocks(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	d.OK(pt.Enqueue(1, 0, append(sessionMsgs("a", "a1", "a2"), sessionMsgs("b", "b1")...)...))
	d.OK(pt.Enqueue(1, 0, sessionMsgs("a", "a3")...))
	ta, tb := pt.SessionToken(1), pt.SessionToken(2)

	// Receiving needs the session's lock.
	wantCode(t, "lock without accept", d.Do(pt.LockSession(1, 0, "a", ta, 10, 1)), codeSessionLost)
	acc := d.OK(pt.Accept(1, 0, "a", ta))
	if acc.SessionId != "a" || len(acc.LockedUntilMs) != 1 || acc.LockedUntilMs[0] != d.Now+partition.DefaultLockDurationMs {
		t.Fatalf("accept: %v", acc)
	}
	wantCode(t, "second accept", d.Do(pt.Accept(1, 0, "a", tb)), codeSessionLocked)
	// A repeated accept (its answer lost) finds the lock its own.
	d.Now += 10
	if again := d.OK(pt.Accept(1, 0, "a", ta)); again.LockedUntilMs[0] != acc.LockedUntilMs[0] {
		t.Fatalf("repeated accept: %v, want the first answer %v", again, acc)
	}
	wantCode(t, "lock with another token", d.Do(pt.LockSession(1, 0, "a", tb, 10, 1)), codeSessionLost)

	// In order; an abandoned message comes back first.
	r := d.OK(pt.LockSession(1, 0, "a", ta, 2, 1))
	if got := bodies(r); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("first lock: %v", got)
	}
	for _, m := range r.Messages {
		if m.LockedUntilMs != acc.LockedUntilMs[0] {
			t.Fatalf("message locked until %d, session until %d", m.LockedUntilMs, acc.LockedUntilMs[0])
		}
	}
	d.OK(pt.Settle(1, 0, main, abandon, r.Messages[0].LockToken))
	d.OK(pt.Enqueue(1, 0, sessionMsgs("a", "a4")...)) // a later arrival belongs to the lock too
	r2 := d.OK(pt.LockSession(1, 0, "a", ta, 10, 2))
	if got := bodies(r2); !slices.Equal(got, []string{"a1", "a3", "a4"}) {
		t.Fatalf("after abandon: %v", got)
	}
	if r2.Messages[0].DeliveryCount != 1 {
		t.Fatalf("abandoned message delivery count %d, want 1", r2.Messages[0].DeliveryCount)
	}
	d.OK(pt.Settle(1, 0, main, complete, r.Messages[1].LockToken))

	// Renewing the session renews its messages' locks.
	d.Now += 30_000
	ren := d.OK(pt.RenewSession(1, 0, "a", ta))
	if ren.LockedUntilMs[0] != d.Now+partition.DefaultLockDurationMs {
		t.Fatalf("renew: %v", ren)
	}
	d.Now += 45_000 // past the first lock, before the renewed one
	d.OK(pt.ExpireLocks())
	d.OK(pt.ExpireSessionLocks())
	d.OK(pt.Settle(1, 0, main, complete, r2.Messages[1].LockToken))

	// The lock runs out: the held messages return, counting a delivery,
	// and the session can be accepted again.
	d.Now = ren.LockedUntilMs[0]
	if next, ok := d.M.NextSessionLockExpiry(); !ok || next != d.Now {
		t.Fatalf("next session lock expiry %d %v, want %d", next, ok, d.Now)
	}
	d.OK(pt.ExpireLocks())
	d.OK(pt.ExpireSessionLocks())
	if _, ok := d.M.NextSessionLockExpiry(); ok {
		t.Fatal("a session lock is left after expiry")
	}
	wantCode(t, "settle after the session lock ended", d.Do(pt.Settle(1, 0, main, complete, r2.Messages[0].LockToken)), codeLost)
	wantCode(t, "renew after expiry", d.Do(pt.RenewSession(1, 0, "a", ta)), codeSessionLost)
	d.OK(pt.Accept(1, 0, "a", tb))
	r3 := d.OK(pt.LockSession(1, 0, "a", tb, 10, 3))
	if got := bodies(r3); !slices.Equal(got, []string{"a1", "a4"}) {
		t.Fatalf("after expiry: %v", got)
	}
	if r3.Messages[0].DeliveryCount != 2 || r3.Messages[1].DeliveryCount != 1 {
		t.Fatalf("delivery counts after expiry %d %d, want 2 1", r3.Messages[0].DeliveryCount, r3.Messages[1].DeliveryCount)
	}
	// Released (the receiver closed): back without counting a delivery.
	d.OK(pt.Release(1, 0, "a", tb))
	d.OK(pt.Accept(1, 0, "a", ta))
	r4 := d.OK(pt.LockSession(1, 0, "a", ta, 10, 4))
	if r4.Messages[0].DeliveryCount != 2 {
		t.Fatalf("delivery count after release %d, want 2", r4.Messages[0].DeliveryCount)
	}
}

func TestSessionAcceptNext(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	if r := d.OK(pt.Accept(1, 0, "", pt.SessionToken(1))); r.SessionId != "" {
		t.Fatalf("accept-next on an empty entity: %v", r)
	}
	if d.M.SessionReady(1, 0) {
		t.Fatal("ready without sessions")
	}
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("b", "b1"), pt.SessionMsg("a", "a1"), pt.SessionMsg("b", "b2")))
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("c", "c1")))
	if !d.M.SessionReady(1, 0) {
		t.Fatal("not ready with sessions")
	}
	// A specific empty session can be accepted, and is not offered.
	d.OK(pt.Accept(1, 0, "empty", pt.SessionToken(9)))
	var got []string
	for i := range 4 {
		got = append(got, d.OK(pt.Accept(1, 0, "", pt.SessionToken(uint64(10+i)))).SessionId)
	}
	// By when each got its first message; then none is left.
	if want := []string{"b", "a", "c", ""}; !slices.Equal(got, want) {
		t.Fatalf("accept-next took %q, want %q", got, want)
	}
	sids, err := d.M.ListSessions(1, 0, 0, 100, 0)
	if err != nil || !slices.Equal(sids, []string{"a", "b", "c", "empty"}) {
		t.Fatalf("list sessions: %q %v", sids, err)
	}
	if sids, _ := d.M.ListSessions(1, 0, 1, 2, 0); !slices.Equal(sids, []string{"b", "c"}) {
		t.Fatalf("list sessions skip 1 top 2: %q", sids)
	}
	// Releasing an empty session forgets it; releasing one with messages
	// offers it again.
	d.OK(pt.Release(1, 0, "empty", pt.SessionToken(9)))
	d.OK(pt.Release(1, 0, "a", pt.SessionToken(11)))
	if r := d.OK(pt.Accept(1, 0, "", pt.SessionToken(20))); r.SessionId != "a" {
		t.Fatalf("accept-next after release: %q", r.SessionId)
	}
	if sids, _ := d.M.ListSessions(1, 0, 0, 100, 0); !slices.Equal(sids, []string{"a", "b", "c"}) {
		t.Fatalf("list sessions after release: %q", sids)
	}
}

func TestSessionState(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	tok := pt.SessionToken(1)
	wantCode(t, "set state unlocked", d.Do(pt.SetState(1, 0, "s", tok, []byte("x"))), codeSessionLost)
	d.OK(pt.Accept(1, 0, "s", tok))
	if st, err := d.M.SessionState(1, 0, "s", tok, d.Now); err != nil || st != nil {
		t.Fatalf("new session's state %q %v, want none", st, err)
	}
	d.OK(pt.SetState(1, 0, "s", tok, []byte("state 1")))
	d.OK(pt.Release(1, 0, "s", tok))
	// Kept while the session has no messages and no lock.
	if sids, _ := d.M.ListSessions(1, 0, 0, 10, 0); !slices.Equal(sids, []string{"s"}) {
		t.Fatalf("sessions %q, want the one with state", sids)
	}
	if _, err := d.M.SessionState(1, 0, "s", tok, d.Now); !errors.Is(err, partition.ErrSessionLockLost) {
		t.Fatalf("state read without the lock: %v", err)
	}
	tok2 := pt.SessionToken(2)
	d.OK(pt.Accept(1, 0, "s", tok2))
	if st, err := d.M.SessionState(1, 0, "s", tok2, d.Now); err != nil || string(st) != "state 1" {
		t.Fatalf("state %q %v", st, err)
	}
	big := bytes.Repeat([]byte{1}, partition.MaxSessionStateBytes+1)
	wantCode(t, "state too large", d.Do(pt.SetState(1, 0, "s", tok2, big)), codeInvalid)
	d.OK(pt.SetState(1, 0, "s", tok2, nil))
	if st, _ := d.M.SessionState(1, 0, "s", tok2, d.Now); st != nil {
		t.Fatalf("cleared state reads %q", st)
	}
	d.OK(pt.Release(1, 0, "s", tok2))
	if sids, _ := d.M.ListSessions(1, 0, 0, 10, 0); len(sids) != 0 {
		t.Fatalf("sessions %q after clearing the only state", sids)
	}
}

// TestSessionDeferAndDeadLetter: deferred messages of a session are
// received under its lock; dead-lettered ones leave the session.
func TestSessionDeferAndDeadLetter(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	d.OK(pt.Enqueue(1, 0, sessionMsgs("a", "a1", "a2", "a3")...))
	tok := pt.SessionToken(1)
	d.OK(pt.Accept(1, 0, "a", tok))
	r := d.OK(pt.LockSession(1, 0, "a", tok, 3, 1))
	d.OK(pt.Settle(1, 0, main, deferD, r.Messages[0].LockToken))
	d.OK(pt.Settle(1, 0, main, deadLetter, r.Messages[1].LockToken))
	seq := r.Messages[0].SequenceNumber
	wantCode(t, "deferred without session", d.Do(pt.LockBySequence(&partitionpb.LockBySequence{
		EntityId: 1, SubQueue: main, SequenceNumbers: []uint64{seq}, TokenSeed: pt.Seed(5)})), codeInvalid)
	got := d.OK(pt.LockBySequence(&partitionpb.LockBySequence{
		EntityId: 1, SubQueue: main, SequenceNumbers: []uint64{seq}, TokenSeed: pt.Seed(5), SessionId: "a", SessionToken: tok}))
	if len(got.Messages) != 1 || string(got.Messages[0].Bare) != "a1" {
		t.Fatalf("receive deferred: %v", bodies(got))
	}
	d.OK(pt.Settle(1, 0, main, complete, got.Messages[0].LockToken))
	dl := d.OK(pt.Lock(1, 0, dlq, 10, 6))
	if got := bodies(dl); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("dead-letter queue: %v", got)
	}
	peek, err := d.M.PeekSession(1, 0, 0, 10, d.Now, "a")
	if err != nil || len(peek) != 1 || string(peek[0].Bare) != "a3" {
		t.Fatalf("peek session: %v %v", peek, err)
	}
}

// checkSessionPeeks checks that a session's peek, which reads the
// session's own index entries, returns what the entity partition's peek
// has of that session.
func checkSessionPeeks(t *testing.T, d *pt.Driver, sids []string) {
	t.Helper()
	all, err := d.M.Peek(1, 0, main, 0, partition.MaxPeekCount, d.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, sid := range sids {
		var want, got []uint64
		for _, m := range all {
			if m.SessionId == sid {
				want = append(want, m.SequenceNumber)
			}
		}
		peek, err := d.M.PeekSession(1, 0, 0, partition.MaxPeekCount, d.Now, sid)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range peek {
			got = append(got, m.SequenceNumber)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("peek of session %s: %v, the partition's peek has %v", sid, got, want)
		}
	}
}

// sessionLog is a random workload of session commands.
func sessionLog(t *testing.T, seed uint64, n int) *pt.Driver {
	rng := rand.New(rand.NewPCG(seed, seed))
	d := pt.NewDriver(t, 1_000_000)
	cfg := pt.SessionQueue(1, 0, "sq")
	cfg.LockDurationMs = 5000
	cfg.MaxDeliveryCount = 3
	d.OK(pt.Upsert(cfg))
	sids := []string{"a", "b", "c", "d"}
	held := map[string][]byte{} // session -> token
	var tokens [][]byte         // message lock tokens handed out
	for i := range n {
		if err := partition.CheckSessions(d.M, 1, 0); err != nil {
			t.Fatalf("before command %d: %v", i, err)
		}
		if i%16 == 0 {
			checkSessionPeeks(t, d, sids)
		}
		d.Now += rng.Int64N(2000)
		sid := sids[rng.IntN(len(sids))]
		var c *partitionpb.Command
		switch k := rng.IntN(100); {
		case k < 25:
			var ms []*partitionpb.NewMessage
			for j := range 1 + rng.IntN(4) {
				m := pt.SessionMsg(sids[rng.IntN(len(sids))], fmt.Sprintf("m%d.%d", i, j))
				if rng.IntN(5) == 0 {
					m.TtlMs = rng.Int64N(10_000) + 1
				}
				ms = append(ms, m)
			}
			c = pt.Enqueue(1, 0, ms...)
		case k < 35:
			tok := pt.SessionToken(uint64(i))
			if rng.IntN(2) == 0 {
				sid = ""
			}
			r := d.Do(pt.Accept(1, 0, sid, tok))
			if r.Code == codeOK && r.SessionId != "" {
				held[r.SessionId] = tok
			}
			continue
		case k < 55:
			r := d.Do(pt.LockSession(1, 0, sid, held[sid], uint32(1+rng.IntN(4)), uint64(i)))
			for _, m := range r.Messages {
				tokens = append(tokens, m.LockToken)
			}
			continue
		case k < 75 && len(tokens) > 0:
			j := rng.IntN(len(tokens))
			disp := []partitionpb.Disposition{complete, abandon, deadLetter, deferD}[rng.IntN(4)]
			c = pt.Settle(1, 0, main, disp, tokens[j])
			tokens = slices.Delete(tokens, j, j+1)
		case k < 80:
			c = pt.RenewSession(1, 0, sid, held[sid])
		case k < 85:
			c = pt.SetState(1, 0, sid, held[sid], []byte(fmt.Sprint(i)))
		case k < 90:
			c = pt.Release(1, 0, sid, held[sid])
		case k < 95:
			c = pt.ExpireSessionLocks()
		default:
			d.Apply(pt.ExpireLocks(), pt.ExpireMessages(), pt.ExpireSessionLocks())
			continue
		}
		d.Do(c)
		if err := partition.CheckSessions(d.M, 1, 0); err != nil {
			t.Fatalf("after command %d (%v): %v", i, c, err)
		}
	}
	return d
}

// TestSessionDeterminism: replicas that apply the same session commands in
// other chunkings, or restart midway, or restore a snapshot, hold
// byte-equal stores.
func TestSessionDeterminism(t *testing.T) {
	skipUnderRace(t)
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a := sessionLog(t, seed, 600)
			checkCounters(t, a.M)
			entries := a.Entries
			b := pt.Open(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			applyInRuns(t, b, entries, rng, nil)

			dir := t.TempDir()
			c := pt.OpenDir(t, dir)
			half := len(entries) / 2
			if _, err := c.Apply(entries[:half]); err != nil {
				t.Fatal(err)
			}
			s, err := c.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if _, err := s.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			s.Release()
			r := pt.Open(t)
			if err := r.Restore(&buf); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = pt.OpenDir(t, dir)
			for _, m := range []*partition.Machine{c, r} {
				if _, err := m.Apply(entries[half-10:]); err != nil {
					t.Fatal(err)
				}
			}
			// n2 applies what n1 proposed: it answers nothing and reads
			// no message it hands out.
			opts := pt.Options()
			opts.Replica = "n2"
			n2, err := partition.Open(t.TempDir(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n2.Close() })
			for _, e := range entries {
				batch, err := partition.DecodeBatch(e.Data)
				if err != nil {
					t.Fatal(err)
				}
				batch.Proposer = "n1"
				data, err := partition.EncodeBatch(batch)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := n2.Apply([]partition.Entry{{Index: e.Index, Data: data}}); err != nil {
					t.Fatal(err)
				}
			}
			sa := snapshotBytes(t, a.M)
			for name, m := range map[string]*partition.Machine{"b": b, "c": c, "restored": r, "n2": n2} {
				if !bytes.Equal(sa, snapshotBytes(t, m)) {
					t.Fatalf("snapshots of a and %s differ", name)
				}
				if n := partition.Misuse(m); n > 0 {
					t.Errorf("%s: %d single deletes met no write or two", name, n)
				}
			}
			ra, _ := a.M.ListSessions(1, 0, 0, 100, 0)
			t.Logf("%d entries, sessions %q, snapshot of %d bytes", len(entries), ra, len(sa))
		})
	}
}

// TestSessionTTL: messages of a session expire only while a receiver holds
// the session, and once one has expired the ones after it expire with it.
func TestSessionTTL(t *testing.T) {
	for _, dl := range []bool{false, true} {
		t.Run(fmt.Sprint("dead-letter ", dl), func(t *testing.T) {
			d := pt.NewDriver(t, 1000)
			cfg := pt.SessionQueue(1, 0, "sq")
			cfg.DeadLetteringOnExpiration = dl
			d.OK(pt.Upsert(cfg))
			short := pt.SessionMsg("a", "m2")
			short.TtlMs = 1000
			d.OK(pt.Enqueue(1, 0, pt.SessionMsg("a", "m1"), short, pt.SessionMsg("a", "m3")))
			d.Now += 5000
			if _, ok := d.M.NextMessageExpiry(); ok {
				t.Fatal("a session message is in the expiry index")
			}
			d.OK(pt.ExpireMessages())
			if s := d.Stats(1, 0); s.ActiveMessages != 3 {
				t.Fatalf("%d active before a receiver came, want 3", s.ActiveMessages)
			}
			tok := pt.SessionToken(1)
			d.OK(pt.Accept(1, 0, "a", tok))
			r := d.OK(pt.LockSession(1, 0, "a", tok, 10, 1))
			if got := bodies(r); !slices.Equal(got, []string{"m1"}) {
				t.Fatalf("received %q, want m1 alone", got)
			}
			s := d.Stats(1, 0)
			wantDead := uint64(0)
			if dl {
				wantDead = 2
			}
			if s.ActiveMessages != 1 || s.DeadLetterMessages != wantDead {
				t.Fatalf("active %d dead %d, want 1 and %d", s.ActiveMessages, s.DeadLetterMessages, wantDead)
			}
			if err := partition.CheckSessions(d.M, 1, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSessionAcceptRequestID: an accept-next repeated under its request id
// (its answer was lost) gets the session it locked, not another; one that
// locked nothing recorded nothing, so its repeat may lock one.
func TestSessionAcceptRequestID(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	withID := func(c *partitionpb.Command, id string) *partitionpb.Command {
		c.RequestId = []byte(id)
		return c
	}
	if r := d.OK(withID(pt.Accept(1, 0, "", pt.SessionToken(1)), "req-1")); r.SessionId != "" {
		t.Fatalf("accept-next on an empty entity: %v", r)
	}
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("a", "a1"), pt.SessionMsg("b", "b1")))
	first := d.OK(withID(pt.Accept(1, 0, "", pt.SessionToken(1)), "req-1"))
	again := d.OK(withID(pt.Accept(1, 0, "", pt.SessionToken(1)), "req-1"))
	if first.SessionId != "a" || again.SessionId != "a" || again.LockedUntilMs[0] != first.LockedUntilMs[0] {
		t.Fatalf("accept-next %v, its repeat %v: want session a twice", first, again)
	}
	if r := d.OK(withID(pt.Accept(1, 0, "", pt.SessionToken(2)), "req-2")); r.SessionId != "b" {
		t.Fatalf("another accept-next: %v, want b", r)
	}
}

// TestSessionParked: a session whose only messages are deferred (or
// scheduled) is listed, its peek shows them with the rest of its messages
// in sequence order and none of another session's; get-message-sessions'
// last-updated-time lists the sessions whose state changed since.
func TestSessionParked(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("a", "a1"), pt.SessionMsg("b", "b1"), pt.SessionMsg("a", "a2"), pt.SessionMsg("a", "a3")))
	sched := pt.SessionMsg("c", "c1")
	sched.ScheduledEnqueueTimeMs = d.Now + 60_000
	d.OK(pt.Enqueue(1, 0, sched))
	tok := pt.SessionToken(1)
	d.OK(pt.Accept(1, 0, "a", tok))
	r := d.OK(pt.LockSession(1, 0, "a", tok, 2, 1))
	d.OK(pt.Settle(1, 0, main, deferD, r.Messages[0].LockToken)) // a1 deferred, a2 held, a3 available
	if err := partition.CheckSessions(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	peek, err := d.M.PeekSession(1, 0, 0, 10, d.Now, "a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range peek {
		got = append(got, string(m.Bare))
	}
	if !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Fatalf("peek of session a: %q", got)
	}
	if peek, _ := d.M.PeekSession(1, 0, r.Messages[1].SequenceNumber, 10, d.Now, "a"); len(peek) != 2 || string(peek[0].Bare) != "a2" {
		t.Fatalf("peek of session a from a2: %v", peek)
	}
	if peek, _ := d.M.PeekSession(1, 0, 0, 10, d.Now, "c"); len(peek) != 1 || string(peek[0].Bare) != "c1" {
		t.Fatalf("peek of session c (scheduled): %v", peek)
	}
	d.OK(pt.Settle(1, 0, main, complete, r.Messages[1].LockToken))
	r3 := d.OK(pt.LockSession(1, 0, "a", tok, 1, 2))
	d.OK(pt.Settle(1, 0, main, complete, r3.Messages[0].LockToken))
	d.OK(pt.Release(1, 0, "a", tok))
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("b", "b2")))
	// a holds only its deferred a1, c only a scheduled message.
	if sids, _ := d.M.ListSessions(1, 0, 0, 10, 0); !slices.Equal(sids, []string{"a", "b", "c"}) {
		t.Fatalf("sessions %q, want a (deferred only), b, c (scheduled only)", sids)
	}

	tb := pt.SessionToken(2)
	d.OK(pt.Accept(1, 0, "b", tb))
	d.Now += 1000
	since := d.Now
	d.OK(pt.SetState(1, 0, "b", tb, []byte("x")))
	if sids, _ := d.M.ListSessions(1, 0, 0, 10, since); !slices.Equal(sids, []string{"b"}) {
		t.Fatalf("sessions updated since %d: %q", since, sids)
	}
	if sids, _ := d.M.ListSessions(1, 0, 0, 10, since+1); len(sids) != 0 {
		t.Fatalf("sessions updated after the last change: %q", sids)
	}
	if err := partition.CheckSessions(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
}

// TestSessionCommandRequestIDs: a set-state, renew or release repeated
// under its request id (the front-end retries after an ambiguous failure,
// e.g. a leader's crash) answers the first attempt's result even when the
// session lock has ended since, and changes nothing again; without the id
// the same command after the lock ended is refused as lock-lost. Request
// ids on these commands need format 8: a format-7 entry with one is
// refused as the replicas of that format did.
func TestSessionCommandRequestIDs(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	withID := func(c *partitionpb.Command, id string) *partitionpb.Command {
		c.RequestId = []byte(id)
		return c
	}
	tok := pt.SessionToken(1)
	d.OK(pt.Accept(1, 0, "s", tok))
	renewed := d.OK(withID(pt.RenewSession(1, 0, "s", tok), "renew-1"))
	d.OK(withID(pt.SetState(1, 0, "s", tok, []byte("one")), "set-1"))
	d.OK(withID(pt.Release(1, 0, "s", tok), "release-1"))

	// The lock is gone: the repeats answer as the first attempts did.
	if r := d.OK(withID(pt.RenewSession(1, 0, "s", tok), "renew-1")); r.LockedUntilMs[0] != renewed.LockedUntilMs[0] {
		t.Fatalf("repeated renew: %v, want the first's %v", r, renewed)
	}
	d.OK(withID(pt.SetState(1, 0, "s", tok, []byte("one")), "set-1"))
	d.OK(withID(pt.Release(1, 0, "s", tok), "release-1"))
	wantCode(t, "set-state under a released lock, a new request", d.Do(withID(pt.SetState(1, 0, "s", tok, []byte("two")), "set-2")), codeSessionLost)
	wantCode(t, "set-state under a released lock, no id", d.Do(pt.SetState(1, 0, "s", tok, []byte("two"))), codeSessionLost)

	tok2 := pt.SessionToken(2)
	d.OK(pt.Accept(1, 0, "s", tok2))
	if st, err := d.M.SessionState(1, 0, "s", tok2, d.Now); err != nil || string(st) != "one" {
		t.Fatalf("state %q %v, want the first set's only", st, err)
	}

	// An entry of format 7 with a request id on a set-state.
	e := d.Log.Entry(t, d.Now, withID(pt.SetState(1, 0, "s", tok2, []byte("three")), "set-3"))
	if e.Data[0] != partition.FormatV8 {
		t.Fatalf("a set-state with a request id is encoded in format %d, want 8", e.Data[0])
	}
	e.Data[0] = partition.FormatV7
	res, err := d.M.Apply([]partition.Entry{e})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "request id on a set-state in format 7", res[0][0], codeInvalid)
	if st, _ := d.M.SessionState(1, 0, "s", tok2, d.Now); string(st) != "one" {
		t.Fatalf("state %q after a refused format-7 set-state", st)
	}
}
