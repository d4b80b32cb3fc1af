package partition_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

var update = flag.Bool("update", false, "rewrite the expected output of the transcripts in testdata/transcripts")

// TestTranscripts runs the transcripts in testdata/transcripts. A
// transcript is a list of commands, each followed by the output it must
// produce ("=> ..." lines); go test -run TestTranscripts -update rewrites
// the outputs. The language:
//
//	@T cmd / +D cmd      set the clock to T, or advance it by D ms, first
//	a ; b                two commands in one Raft entry
//	upsert E/P [name=N lock=MS maxdc=N ttl=MS dle max=BYTES status=S dedup dupwin=MS]
//	delete E/P
//	enqueue E/P body[/ttl=MS][/at=T][/id=ID] ...   (the message id is the body unless id= says)
//	lock E/P [dlq] [n=N] [seed=S] [rad]
//	deferred E/P [dlq] SEQ... [seed=S] [rad]      (LockBySequence)
//	complete|abandon|release|defer|deadletter E/P [dlq] TOK... [reason=R desc=D props=P]
//	renew E/P [dlq] TOK...
//	cancel E/P SEQ...
//	expire | activate | expire-msgs
//	stats E/P | dump E/P [dlq] | available E/P [dlq] | peek E/P [dlq] [from=SEQ] [n=N]
//	next-lock | next-scheduled | next-expiry | restart
//
// TOK is a sequence number (its latest lock token), old:SEQ (the token
// before that) or bad (a token never issued).
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/transcripts/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runTranscript(t, f)
		})
	}
}

func runTranscript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := &transcript{t: t, dir: dir, d: &pt.Driver{T: t, M: pt.OpenDir(t, dir)}, tokens: map[uint64][][]byte{}}
	var out bytes.Buffer
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "=>") {
			continue
		}
		out.WriteString(line + "\n")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var want []string
		for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "=>"); j++ {
			want = append(want, strings.TrimSpace(strings.TrimPrefix(lines[j], "=>")))
		}
		got := tr.run(line)
		for _, g := range got {
			out.WriteString("=> " + g + "\n")
		}
		if !*update && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, i+1, line,
				strings.Join(got, "\n      "), strings.Join(want, "\n      "))
		}
	}
	if *update {
		if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type transcript struct {
	t      *testing.T
	dir    string
	d      *pt.Driver
	tokens map[uint64][][]byte // lock tokens issued, by sequence number
}

// run runs one line and returns its output lines.
func (tr *transcript) run(line string) []string {
	f := strings.Fields(line)
	if len(f) > 0 && (f[0][0] == '@' || f[0][0] == '+') {
		n, err := strconv.ParseInt(f[0][1:], 10, 64)
		if err != nil {
			tr.t.Fatalf("bad clock %q", f[0])
		}
		if f[0][0] == '@' {
			tr.d.Now = n
		} else {
			tr.d.Now += n
		}
		f = f[1:]
	}
	var cmds []*partitionpb.Command
	var parts [][]string
	for _, part := range splitFields(f, ";") {
		if c := tr.command(part); c != nil {
			cmds = append(cmds, c)
			parts = append(parts, part)
		} else if len(cmds) == 0 {
			return tr.query(part)
		} else {
			tr.t.Fatalf("%q cannot share an entry", strings.Join(part, " "))
		}
	}
	results := tr.d.Apply(cmds...)
	var out []string
	for i, r := range results {
		for _, m := range r.Messages {
			if len(m.LockToken) > 0 {
				tr.tokens[m.SequenceNumber] = append(tr.tokens[m.SequenceNumber], m.LockToken)
			}
		}
		out = append(out, renderResult(parts[i][0], r))
	}
	return []string{strings.Join(out, " ; ")}
}

func splitFields(f []string, sep string) [][]string {
	var out [][]string
	cur := []string{}
	for _, w := range f {
		if w == sep {
			out = append(out, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, w)
	}
	return append(out, cur)
}

func (tr *transcript) entity(s string) (uint64, uint32) {
	id, part, ok := strings.Cut(s, "/")
	i, err1 := strconv.ParseUint(id, 10, 64)
	p, err2 := strconv.ParseUint(part, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		tr.t.Fatalf("bad entity %q, want E/P", s)
	}
	return i, uint32(p)
}

func (tr *transcript) num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		tr.t.Fatalf("bad number %q", s)
	}
	return n
}

var dispositions = map[string]partitionpb.Disposition{
	"complete":   partitionpb.Disposition_DISPOSITION_COMPLETE,
	"abandon":    partitionpb.Disposition_DISPOSITION_ABANDON,
	"release":    partitionpb.Disposition_DISPOSITION_RELEASE,
	"defer":      partitionpb.Disposition_DISPOSITION_DEFER,
	"deadletter": partitionpb.Disposition_DISPOSITION_DEAD_LETTER,
}

var statuses = map[string]partitionpb.EntityStatus{
	"active":           partitionpb.EntityStatus_ENTITY_STATUS_ACTIVE,
	"disabled":         partitionpb.EntityStatus_ENTITY_STATUS_DISABLED,
	"send-disabled":    partitionpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED,
	"receive-disabled": partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED,
}

// command builds the command of a line, or returns nil for a query.
func (tr *transcript) command(f []string) *partitionpb.Command {
	name, args := f[0], f[1:]
	switch name {
	case "expire":
		return pt.ExpireLocks()
	case "activate":
		return pt.ActivateScheduled()
	case "expire-msgs":
		return pt.ExpireMessages()
	case "expire-sessions":
		return pt.ExpireSessionLocks()
	}
	if len(args) == 0 {
		return nil
	}
	id, part := tr.entity(args[0])
	args = args[1:]
	sub := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if len(args) > 0 && args[0] == "dlq" {
		sub, args = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, args[1:]
	}
	switch name {
	case "upsert":
		cfg := pt.Queue(id, part, "")
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "name":
				cfg.Name = v
			case "lock":
				cfg.LockDurationMs = tr.num(v)
			case "maxdc":
				cfg.MaxDeliveryCount = uint32(tr.num(v))
			case "ttl":
				cfg.DefaultTtlMs = tr.num(v)
			case "dle":
				cfg.DeadLetteringOnExpiration = true
			case "max":
				cfg.MaxSizeBytes = tr.num(v)
			case "status":
				cfg.Status = uint32(statuses[v])
			case "dedup":
				cfg.RequiresDuplicateDetection = true
			case "dupwin":
				cfg.DuplicateDetectionWindowMs = tr.num(v)
			case "sessions":
				cfg.RequiresSession = true
			default:
				tr.t.Fatalf("upsert: unknown option %q", a)
			}
		}
		return pt.Upsert(cfg)
	case "delete":
		return pt.Delete(id, part)
	case "enqueue":
		var msgs []*partitionpb.NewMessage
		for _, a := range args {
			opts := strings.Split(a, "/")
			m := pt.Msg(opts[0])
			for _, o := range opts[1:] {
				k, v, _ := strings.Cut(o, "=")
				switch k {
				case "ttl":
					m.TtlMs = tr.num(v)
				case "at":
					m.ScheduledEnqueueTimeMs = tr.num(v)
				case "id":
					m.MessageId = v
				case "s":
					m.SessionId = v
				default:
					tr.t.Fatalf("enqueue: unknown option %q", o)
				}
			}
			msgs = append(msgs, m)
		}
		return pt.Enqueue(id, part, msgs...)
	case "lock":
		l := &partitionpb.Lock{EntityId: id, Partition: part, SubQueue: sub, MaxCount: 1, TokenSeed: pt.Seed(1)}
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "n":
				l.MaxCount = uint32(tr.num(v))
			case "seed":
				l.TokenSeed = pt.Seed(uint64(tr.num(v)))
			case "rad":
				l.ReceiveAndDelete, l.TokenSeed = true, nil
			default:
				tr.t.Fatalf("lock: unknown option %q", a)
			}
		}
		return &partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: l}}
	case "renew":
		return pt.Renew(id, part, sub, tr.tokenArgs(args)...)
	case "accept", "slock", "srenew", "sstate", "srelease":
		// Session commands: accept E/P SESSION|next tok=N, then the
		// others name the session and the token: slock E/P SESSION tok=N
		// [n=K seed=S], srenew, srelease, sstate E/P SESSION tok=N [STATE].
		if len(args) == 0 {
			tr.t.Fatalf("%s: no session", name)
		}
		sid, tok := args[0], pt.SessionToken(0)
		n, seed, state := uint32(1), uint64(1), []byte(nil)
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "tok":
				tok = pt.SessionToken(uint64(tr.num(v)))
			case "n":
				n = uint32(tr.num(v))
			case "seed":
				seed = uint64(tr.num(v))
			default:
				state = []byte(a)
			}
		}
		switch name {
		case "accept":
			if sid == "next" {
				sid = ""
			}
			return pt.Accept(id, part, sid, tok)
		case "slock":
			return pt.LockSession(id, part, sid, tok, n, seed)
		case "srenew":
			return pt.RenewSession(id, part, sid, tok)
		case "sstate":
			return pt.SetState(id, part, sid, tok, state)
		default:
			return pt.Release(id, part, sid, tok)
		}
	case "cancel":
		var seqs []uint64
		for _, a := range args {
			seqs = append(seqs, tr.seq(a))
		}
		return pt.CancelScheduled(id, part, seqs...)
	case "deferred":
		l := &partitionpb.LockBySequence{EntityId: id, Partition: part, SubQueue: sub, TokenSeed: pt.Seed(1)}
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "seed":
				l.TokenSeed = pt.Seed(uint64(tr.num(v)))
			case "rad":
				l.ReceiveAndDelete, l.TokenSeed = true, nil
			default:
				l.SequenceNumbers = append(l.SequenceNumbers, tr.seq(a))
			}
		}
		return pt.LockBySequence(l)
	}
	if d, ok := dispositions[name]; ok {
		s := &partitionpb.Settle{EntityId: id, Partition: part, SubQueue: sub, Disposition: d}
		var toks []string
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "reason":
				s.DeadLetterReason = v
			case "desc":
				s.DeadLetterDescription = v
			case "props":
				s.PropertiesToModify = []byte(v)
			default:
				toks = append(toks, a)
			}
		}
		s.LockTokens = tr.tokenArgs(toks)
		return pt.SettleCmd(s)
	}
	return nil
}

func (tr *transcript) tokenArgs(args []string) [][]byte {
	var out [][]byte
	for _, a := range args {
		switch {
		case a == "bad":
			out = append(out, append(pt.Seed(1), pt.Seed(0xbad)...))
		case strings.HasPrefix(a, "old:"):
			ts := tr.tokens[tr.seq(a[4:])]
			if len(ts) < 2 {
				tr.t.Fatalf("no old token for %s", a)
			}
			out = append(out, ts[len(ts)-2])
		default:
			ts := tr.tokens[tr.seq(a)]
			if len(ts) == 0 {
				tr.t.Fatalf("no token for %s", a)
			}
			out = append(out, ts[len(ts)-1])
		}
	}
	return out
}

// query answers a line that reads state.
func (tr *transcript) query(f []string) []string {
	m := tr.d.M
	switch f[0] {
	case "next-lock", "next-scheduled", "next-expiry", "next-session-lock":
		next := map[string]func() (int64, bool){
			"next-lock": m.NextLockExpiry, "next-scheduled": m.NextScheduledDue, "next-expiry": m.NextMessageExpiry,
			"next-session-lock": m.NextSessionLockExpiry,
		}[f[0]]
		if ms, ok := next(); ok {
			return []string{strconv.FormatInt(ms, 10)}
		}
		return []string{"none"}
	case "restart":
		if err := m.Close(); err != nil {
			tr.t.Fatal(err)
		}
		tr.d.M = pt.OpenDir(tr.t, tr.dir)
		return []string{fmt.Sprintf("applied=%d", tr.d.M.AppliedIndex())}
	}
	if len(f) < 2 {
		tr.t.Fatalf("unknown line %q", strings.Join(f, " "))
	}
	id, part := tr.entity(f[1])
	sub := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if len(f) > 2 && f[2] == "dlq" {
		sub = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	switch f[0] {
	case "stats":
		s, err := m.Stats(id, part)
		if err != nil {
			return []string{err.Error()}
		}
		return []string{fmt.Sprintf("active=%d dead=%d scheduled=%d locked=%d size=%d",
			s.ActiveMessages, s.DeadLetterMessages, s.ScheduledMessages, s.LockedMessages, s.SizeBytes)}
	case "available":
		return []string{strconv.FormatBool(m.Available(id, part, sub))}
	case "sessions":
		sids, err := m.ListSessions(id, part, 0, 1000, 0)
		if err != nil {
			return []string{err.Error()}
		}
		if len(sids) == 0 {
			return []string{"(none)"}
		}
		return []string{strings.Join(sids, " ")}
	case "state":
		// state E/P SESSION tok=N: the state as its lock holder reads it.
		if len(f) < 4 {
			tr.t.Fatal("state E/P SESSION tok=N")
		}
		_, v, _ := strings.Cut(f[3], "=")
		st, err := m.SessionState(id, part, f[2], pt.SessionToken(uint64(tr.num(v))), tr.d.Now)
		switch {
		case err != nil:
			return []string{err.Error()}
		case st == nil:
			return []string{"(null)"}
		}
		return []string{string(st)}
	case "peek":
		from, n := uint64(0), uint32(100)
		for _, a := range f[2:] {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "from":
				from = tr.seq(v)
			case "n":
				n = uint32(tr.num(v))
			case "dlq":
			default:
				tr.t.Fatalf("peek: unknown option %q", a)
			}
		}
		msgs, err := m.Peek(id, part, sub, from, n, tr.d.Now)
		if err != nil {
			return []string{err.Error()}
		}
		if len(msgs) == 0 {
			return []string{"(empty)"}
		}
		var out []string
		for _, msg := range msgs {
			out = append(out, renderMessage(msg))
		}
		return out
	case "dump":
		msgs, err := partition.Messages(m, id, part, sub)
		if err != nil {
			tr.t.Fatal(err)
		}
		if len(msgs) == 0 {
			return []string{"(empty)"}
		}
		var out []string
		for _, msg := range msgs {
			out = append(out, renderMessage(partition.HandOut(msg)))
		}
		return out
	}
	tr.t.Fatalf("unknown line %q", strings.Join(f, " "))
	return nil
}

// seq parses a sequence number written as seqString writes it.
func (tr *transcript) seq(s string) uint64 {
	if p, n, ok := strings.Cut(s, "."); ok {
		return uint64(tr.num(p))<<48 | uint64(tr.num(n))
	}
	return uint64(tr.num(s))
}

func seqString(seq uint64) string {
	if p := seq >> 48; p != 0 {
		return fmt.Sprintf("%d.%d", p, seq&(1<<48-1))
	}
	return strconv.FormatUint(seq, 10)
}

func renderResult(name string, r *partitionpb.Result) string {
	s := strings.TrimPrefix(r.Code.String(), "RESULT_")
	if len(r.SequenceNumbers) > 0 {
		var seqs []string
		for _, q := range r.SequenceNumbers {
			seqs = append(seqs, seqString(q))
		}
		s += " seq=" + strings.Join(seqs, ",")
	}
	for _, m := range r.Messages {
		s += fmt.Sprintf(" %s(%s dc=%d", seqString(m.SequenceNumber), m.Bare, m.DeliveryCount)
		if len(m.LockToken) > 0 {
			s += fmt.Sprintf(" until=%d", m.LockedUntilMs)
		}
		s += ")"
	}
	if r.SessionId != "" {
		s += " session=" + r.SessionId
	}
	if len(r.LockedUntilMs) > 0 {
		var us []string
		for _, u := range r.LockedUntilMs {
			us = append(us, strconv.FormatInt(u, 10))
		}
		s += " until=" + strings.Join(us, ",")
	}
	if (name == "lock" || name == "slock") && r.Code == partitionpb.ResultCode_RESULT_OK && len(r.Messages) == 0 ||
		name == "accept" && r.Code == partitionpb.ResultCode_RESULT_OK && r.SessionId == "" {
		s += " (none)"
	}
	if name == "deferred" && r.Code != partitionpb.ResultCode_RESULT_OK {
		s += " " + r.Description
	}
	return s
}

func renderMessage(m *partitionpb.Message) string {
	s := fmt.Sprintf("%s %s dc=%d enq=%d", seqString(m.SequenceNumber), m.Bare, m.DeliveryCount, m.EnqueuedTimeMs)
	switch m.State {
	case partitionpb.MessageState_MESSAGE_STATE_DEFERRED:
		s += " deferred"
	case partitionpb.MessageState_MESSAGE_STATE_SCHEDULED:
		s += fmt.Sprintf(" scheduled=%d", m.ScheduledEnqueueTimeMs)
	}
	if len(m.LockToken) > 0 {
		s += fmt.Sprintf(" locked=%d", m.LockedUntilMs)
	}
	if m.ExpiresAtMs != 0 {
		s += fmt.Sprintf(" expires=%d", m.ExpiresAtMs)
	}
	if m.DeadLetterReason != "" || m.DeadLetterSource != "" {
		s += fmt.Sprintf(" reason=%q desc=%q source=%q", m.DeadLetterReason, m.DeadLetterDescription, m.DeadLetterSource)
	}
	for _, p := range m.ModifiedProperties {
		s += fmt.Sprintf(" props=%s", p)
	}
	return s
}
