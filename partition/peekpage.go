package partition

import (
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// A peek's answer, bounded in bytes (PeekRequest.max_bytes) and, for a
// preview, made of messages whose bodies are cut to a prefix
// (PeekRequest.body_prefix_bytes, cutBody). Messages may be of 100 MB,
// and a peek is a read that any client with Listen rights may repeat, so
// neither the node nor the front-end that forwards the answer should hold
// more than the bound for it.

// PeekBounds bound a peek's answer in bytes.
type PeekBounds struct {
	// MaxBytes bounds the answer's messages (their header, annotations
	// and bare, as answered): a message that would take them past it
	// ends the answer, unless it is the first, so that a reader paging on
	// from the last number always moves. 0, or more than MaxPeekBytes:
	// MaxPeekBytes.
	MaxBytes uint64
	// BodyPrefix, when > 0, cuts each message's body to that many bytes
	// (cutBody) and marks it body_truncated; the size reported is the
	// whole message's. 0: whole messages.
	BodyPrefix uint32
}

// PeekBoundsOf reads a request's bounds.
func PeekBoundsOf(req *partitionpb.PeekRequest) PeekBounds {
	return PeekBounds{MaxBytes: req.GetMaxBytes(), BodyPrefix: req.GetBodyPrefixBytes()}
}

// PeekBounded answers a PeekRequest from the machine's committed state:
// PeekSession when it names a session (the main sub-queue), else Peek,
// within the request's bounds in bytes.
func (m *Machine) PeekBounded(req *partitionpb.PeekRequest, nowMs int64) ([]*partitionpb.Message, error) {
	b := PeekBoundsOf(req)
	if req.GetSessionId() != "" {
		return m.peekSession(req.EntityId, req.Partition, req.FromSequenceNumber, req.MaxCount, nowMs, req.SessionId, b)
	}
	return m.peek(req.EntityId, req.Partition, req.SubQueue, req.FromSequenceNumber, req.MaxCount, nowMs, "", b)
}

// peekPage gathers a peek's answer. Invariant: size is the sum of the
// answered messages' header, annotations and bare lengths, and it exceeds
// limit only when out holds a single message.
type peekPage struct {
	want   int   // messages asked for (already capped at MaxPeekCount)
	limit  int64 // bytes
	prefix int   // body prefix; 0: whole
	out    []*partitionpb.Message
	size   int64
}

func newPeekPage(max uint32, b PeekBounds) *peekPage {
	limit := int64(MaxPeekBytes)
	if b.MaxBytes > 0 && b.MaxBytes < MaxPeekBytes {
		limit = int64(b.MaxBytes)
	}
	return &peekPage{want: int(min(max, MaxPeekCount)), limit: limit, prefix: int(b.BodyPrefix)}
}

// full reports whether the page takes no more messages.
func (p *peekPage) full() bool { return len(p.out) >= p.want || p.size >= p.limit }

// add reads msg's body (a state record from a cursor or scan), cuts it to
// the prefix, and appends it, unless it would take the page past its
// bound: then it returns false and the page is done. A whole message is
// judged by the size its state record keeps, before its body is read, so
// a large message that ends the page is never read.
func (p *peekPage) add(r store.Reader, logs *logReader, k ekey, msg *partitionpb.StoredMessage) (bool, error) {
	if len(p.out) > 0 && p.prefix == 0 && p.size+msg.Size > p.limit {
		return false, nil
	}
	var bare []byte
	var cut bool
	if p.prefix == 0 {
		if err := readBody(r, logs, k, msg); err != nil {
			return false, err
		}
		bare = msg.Bare
		if msg.Size == 0 { // the state record always has it; this is cheap insurance
			msg.Size = int64(len(msg.Header) + len(msg.Annotations) + len(msg.Bare))
		}
	} else {
		var err error
		if bare, cut, err = previewBody(r, logs, k, msg, p.prefix); err != nil {
			return false, err
		}
	}
	unlock(msg)
	out := handOut(msg)
	out.Size, out.Bare, out.BodyTruncated = msg.Size, bare, cut
	cost := int64(len(out.Header) + len(out.Annotations) + len(out.Bare))
	if len(p.out) > 0 && p.size+cost > p.limit {
		return false, nil
	}
	p.out = append(p.out, out)
	p.size += cost
	return true, nil
}

// previewSlack is what a preview reads of a staged bare message beyond
// the prefix, for the sections before its body: Service Bus bounds a
// message's properties and application properties to 64 KB.
const previewSlack = 64 << 10

// previewBody reads msg's sections with its bare message cut to prefix
// bytes of body (cutHead), and returns the cut bare message. Of a staged
// bare message (up to 100 MB) it reads only the first prefix +
// previewSlack bytes, and the rest only when they do not hold the
// sections before the body.
func previewBody(r store.Reader, logs *logReader, k ekey, msg *partitionpb.StoredMessage, prefix int) ([]byte, bool, error) {
	complete := true
	switch {
	case msg.BodyIndex != 0:
		if err := logs.sections(msg); err != nil {
			return nil, false, err
		}
	default:
		if err := store.ReadBodyRecord(r, k, msg); err != nil {
			return nil, false, err
		}
		if len(msg.BodyBlob) == 0 {
			break
		}
		n := uint64(prefix) + previewSlack
		complete = n >= msg.BodyBlobLength
		if err := store.ReadBlobPrefix(r, k, msg, n); err != nil {
			return nil, false, err
		}
	}
	if msg.Size == 0 && complete {
		msg.Size = int64(len(msg.Header) + len(msg.Annotations) + len(msg.Bare))
	}
	if bare, cut, ok := cutHead(msg.Bare, complete, prefix); ok {
		return bare, cut, nil
	}
	if err := readBlob(r, k, msg); err != nil {
		return nil, false, err
	}
	bare, cut := cutBody(msg.Bare, prefix)
	return bare, cut, nil
}
