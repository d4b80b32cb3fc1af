// Package history records what the workload's clients did, as Jepsen
// does: every operation is an invoke followed by exactly one completion,
// ok (it happened), fail (it certainly did not) or info (unknown: a
// timeout, a dropped connection). Checkers read the history and nothing
// else, so a run can be checked again from its history.jsonl alone.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Type is the kind of a history entry.
type Type string

const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// The functions the workloads perform.
const (
	Send     = "send"     // MsgID is the id sent
	Receive  = "receive"  // a completion carries the delivery's fields
	Complete = "complete" // MsgID and LockToken name the delivery settled
	// Renew renews the lock LockToken names through $management
	// (renew-lock); fail means the broker said the lock is lost.
	Renew = "renew"
	// AcceptSession attaches a session receiver (accept-next); its ok
	// carries the session granted in SessionID and the holding's name in
	// LockToken. Receives and completes of that link carry both too.
	AcceptSession = "accept-session"
	// GetState and SetState read and write the state of the session a
	// session receiver holds ($management get-session-state,
	// set-session-state); Attrs["state"] is the value written, or read
	// by an ok get ("" for none).
	GetState = "get-state"
	SetState = "set-state"
	// The topic metadata workload's operations on a family (a topic and
	// its TopicFamilySubs subscriptions: Attrs["family"], Attrs["sub"] the
	// subscription's index), with Entity TopicCatalog; an ok's
	// Attrs["result"] is created/exists, deleted/absent, found/absent, or
	// no-topic for a subscription created without its topic.
	CreateTopic = "create-topic"
	DeleteTopic = "delete-topic"
	GetTopic    = "get-topic"
	CreateSub   = "create-sub"
	DeleteSub   = "delete-sub"
	GetSub      = "get-sub"
	AddRule     = "add-rule"
	RemoveRule  = "remove-rule"
	// Abandon, DeadLetter and Defer settle the delivery MsgID and
	// LockToken name otherwise than by completing it (the settlement
	// workload): abandon returns it, dead-letter moves it to the
	// dead-letter sub-queue, defer sets it aside for a receive by
	// sequence number. Their ok means the broker accepted the outcome.
	Abandon    = "abandon"
	DeadLetter = "dead-letter"
	Defer      = "defer"
	// Create, Delete and Get are the metadata workload's entity
	// operations; Attrs["entity"] names the entity and Attrs["result"]
	// what an ok answered (created, exists, deleted, absent, found).
	Create = "create"
	Delete = "delete"
	Get    = "get"
)

// TopicCatalog is the Entity of the topic metadata workload's operations,
// and TopicFamilySubs how many subscriptions each family's topic may have.
const (
	TopicCatalog    = "$catalog-topics"
	TopicFamilySubs = 2
)

// Op is one history entry. An invoke and its completion share Process
// and F; a process runs one operation at a time, so a completion belongs
// to the process's latest invoke.
type Op struct {
	Index   int64  `json:"index"`
	Process int    `json:"process"`
	Type    Type   `json:"type"`
	F       string `json:"f"`
	// Time is nanoseconds since the run started, on the harness's
	// monotonic clock (one clock: everything runs on one machine).
	Time  int64  `json:"time"`
	MsgID string `json:"msg_id,omitempty"`
	// Seq is the broker's x-opt-sequence-number of a delivery.
	Seq int64 `json:"seq,omitempty"`
	// DeliveryCount is the AMQP header's delivery-count: earlier
	// deliveries of the message that did not end in a settlement (the
	// SDKs show it plus one).
	DeliveryCount uint32 `json:"delivery_count,omitempty"`
	LockToken     string `json:"lock_token,omitempty"`
	Err           string `json:"err,omitempty"`

	// Entity names the entity an operation of a workload other than the
	// plain queue's acts on (the queue workload leaves it empty): each
	// workload's checkers read the operations of its entities.
	Entity string `json:"entity,omitempty"`
	// SessionID is a session message's, or the session a receiver holds.
	SessionID string `json:"session_id,omitempty"`
	// AtMs: on a send, the scheduled enqueue time asked for; on a
	// receive's ok, the harness's wall clock when the message reached the
	// workload; both Unix milliseconds.
	AtMs int64 `json:"at_ms,omitempty"`
	// Attrs carries what a workload needs its checker to know and the
	// fields above do not say: a topic message's application properties,
	// a metadata operation's entity and result.
	Attrs map[string]string `json:"attrs,omitempty"`
}

func (o Op) String() string {
	s := fmt.Sprintf("#%d p%d %s %s t=%s", o.Index, o.Process, o.Type, o.F, time.Duration(o.Time).Round(time.Millisecond))
	if o.MsgID != "" {
		s += " id=" + o.MsgID
	}
	if o.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", o.Seq)
	}
	if o.LockToken != "" {
		s += fmt.Sprintf(" dc=%d lock=%s", o.DeliveryCount, o.LockToken)
	}
	if o.Entity != "" {
		s += " entity=" + o.Entity
	}
	if o.SessionID != "" {
		s += " session=" + o.SessionID
	}
	if o.AtMs != 0 {
		s += fmt.Sprintf(" at=%d", o.AtMs)
	}
	if len(o.Attrs) > 0 {
		s += fmt.Sprintf(" %v", o.Attrs)
	}
	if o.Err != "" {
		s += " err=" + o.Err
	}
	return s
}

// Recorder appends operations from many goroutines. It keeps the history
// in memory for the checkers (a CI run holds a few hundred thousand
// entries, tens of MB) and, given a writer, streams each entry to it as
// well, so that a run killed before its report still leaves its history.
//
// It holds at most MaxOps entries: past that it drops them and says so
// (Overflowed), so that a client stuck in a loop fails the run instead
// of exhausting a shared machine's memory.
type Recorder struct {
	start  time.Time
	MaxOps int

	mu       sync.Mutex
	ops      []Op
	w        *bufio.Writer
	enc      *json.Encoder
	werr     error
	dropped  int64
	lastSync time.Time
}

// DefaultMaxOps bounds a history: far beyond what the CI profile records
// (about 250,000 entries), and what the soak's rates record in about five
// hours. A run that reached it peaked at 5.9 GB of harness RSS, history
// and checkers together.
const DefaultMaxOps = 5_000_000

// NewRecorder starts the run's clock. w, if not nil, receives every entry
// as a JSON line.
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{start: time.Now(), MaxOps: DefaultMaxOps}
	if w != nil {
		r.w = bufio.NewWriterSize(w, 1<<16)
		r.enc = json.NewEncoder(r.w)
	}
	return r
}

// Since is the run's clock: nanoseconds since NewRecorder.
func (r *Recorder) Since() int64 { return int64(time.Since(r.start)) }

// Start is when the run's clock started.
func (r *Recorder) Start() time.Time { return r.start }

// Add stamps op with the next index and the current time and appends it.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = int64(len(r.ops))
	op.Time = r.Since()
	if len(r.ops) >= r.MaxOps {
		r.dropped++
		return op
	}
	r.ops = append(r.ops, op)
	if r.enc != nil && r.werr == nil {
		r.werr = r.enc.Encode(op)
		// Flushed about once a second, so that a killed run loses at
		// most that much.
		if now := time.Now(); now.Sub(r.lastSync) > time.Second {
			r.lastSync = now
			if r.werr == nil {
				r.werr = r.w.Flush()
			}
		}
	}
	return op
}

// Flush writes out what the stream buffered; it returns the stream's
// first error.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && r.werr == nil {
		r.werr = r.w.Flush()
	}
	return r.werr
}

// Overflowed counts the entries dropped past MaxOps.
func (r *Recorder) Overflowed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Pair is an operation: its invoke and its completion (the zero Op, with
// Type "", when the history ended before it completed).
type Pair struct {
	Invoke, Done Op
}

// Pairs matches each completion to its process's open invoke, in order.
func Pairs(ops []Op) []Pair {
	open := make(map[int]int) // process -> index in out
	var out []Pair
	for _, op := range ops {
		if op.Type == Invoke {
			open[op.Process] = len(out)
			out = append(out, Pair{Invoke: op})
			continue
		}
		if i, ok := open[op.Process]; ok {
			out[i].Done = op
			delete(open, op.Process)
		}
	}
	return out
}

// Select returns the operations of the given entities ("" is the queue
// workload's), in order: a checker of one workload reads only its own.
func Select(ops []Op, entities ...string) []Op {
	want := map[string]bool{}
	for _, e := range entities {
		want[e] = true
	}
	var out []Op
	for _, op := range ops {
		if want[op.Entity] {
			out = append(out, op)
		}
	}
	return out
}

// WriteJSONL writes one JSON object per line.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadFile reads a history.jsonl back, to check a finished run again.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []Op
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var op Op
		if err := dec.Decode(&op); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", path, len(ops), err)
		}
		ops = append(ops, op)
	}
}
