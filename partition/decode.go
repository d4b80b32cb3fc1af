package partition

import (
	"bytes"
	"math"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/wire"
)

// Decoding an entry without copying its message bodies.
//
// proto.Unmarshal copies every bytes field. Every replica decodes every
// entry it applies, and an entry of sends is nearly all bodies, which the
// apply path only measures and points at (bodies stay in the Raft log,
// logbodies.go) or writes into a store batch, which copies them anyway:
// the decode's copies of the bodies, and collecting them again, were a
// large share of what a send costs in profiles of the dev cluster.
//
// aliasBatch decodes the shape EncodeBatch writes and lets the sections of
// each NewMessage point into the entry. It handles Enqueue commands itself
// and hands every other command to proto.Unmarshal. Anything it does not
// expect (a field it does not know, one repeated that proto would merge,
// a wire type out of place, a string that is not UTF-8) makes it give up,
// and DecodeBatch decodes the entry with proto.Unmarshal as before: the
// two agree on every entry the fast path accepts (FuzzDecodeBatch).

// aliasBatch decodes a Batch from p, the entry after its format byte. ok is
// false if p is not in the shape it decodes.
func aliasBatch(p []byte, views lazyViews) (b *partitionpb.Batch, ok bool) {
	b = new(partitionpb.Batch)
	var seen wire.Set
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok {
			return nil, false
		}
		p = rest
		switch {
		case f.Num == 1 && f.Typ == protowire.VarintType && seen.First(1):
			b.NowMs = int64(f.V)
		case f.Num == 2 && f.Typ == protowire.BytesType:
			c, ok := aliasCommand(f.B, views)
			if !ok {
				return nil, false
			}
			b.Commands = append(b.Commands, c)
		case f.Num == 3 && f.Typ == protowire.BytesType && seen.First(3) && utf8.Valid(f.B):
			b.Proposer = string(f.B)
		case f.Num == 4 && f.Typ == protowire.BytesType:
			// The leader's plan of a send to a topic (plan.go): small.
			tp := new(partitionpb.TopicPlan)
			if proto.Unmarshal(f.B, tp) != nil {
				return nil, false
			}
			b.TopicPlans = append(b.TopicPlans, tp)
		default:
			return nil, false
		}
	}
	return b, true
}

// aliasCommand decodes a Command: an Enqueue (with or without a request id)
// by hand, any other through proto.Unmarshal.
func aliasCommand(p []byte, views lazyViews) (*partitionpb.Command, bool) {
	var enqueue, requestID []byte
	for q := p; len(q) > 0; {
		f, rest, ok := wire.Next(q)
		if !ok {
			return nil, false
		}
		q = rest
		switch {
		case f.Typ != protowire.BytesType:
			return protoCommand(p)
		case f.Num == 3 && enqueue == nil: // Command.enqueue
			enqueue = f.B
		case f.Num == 12 && requestID == nil: // Command.request_id
			requestID = f.B
		default:
			return protoCommand(p)
		}
	}
	if enqueue == nil {
		return protoCommand(p)
	}
	e, ok := aliasEnqueue(enqueue, views)
	if !ok {
		return nil, false
	}
	return &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: e}, RequestId: requestID}, true
}

func protoCommand(p []byte) (*partitionpb.Command, bool) {
	c := new(partitionpb.Command)
	if proto.Unmarshal(p, c) != nil {
		return nil, false
	}
	return c, true
}

func aliasEnqueue(p []byte, views lazyViews) (*partitionpb.Enqueue, bool) {
	e := new(partitionpb.Enqueue)
	var seen wire.Set
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok {
			return nil, false
		}
		p = rest
		switch {
		case f.Num == 1 && f.Typ == protowire.VarintType && seen.First(1):
			e.EntityId = f.V
		case f.Num == 2 && f.Typ == protowire.VarintType && seen.First(2):
			e.Partition = uint32(f.V) // as proto truncates a uint32
		case f.Num == 3 && f.Typ == protowire.BytesType:
			m, ok := aliasNewMessage(f.B, views)
			if !ok {
				return nil, false
			}
			e.Messages = append(e.Messages, m)
		default:
			return nil, false
		}
	}
	return e, true
}

func aliasNewMessage(p []byte, views lazyViews) (*partitionpb.NewMessage, bool) {
	m := new(partitionpb.NewMessage)
	var seen wire.Set
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok || !seen.First(f.Num) {
			return nil, false
		}
		p = rest
		varint, str := f.Typ == protowire.VarintType, f.Typ == protowire.BytesType && utf8.Valid(f.B)
		switch {
		case f.Num == 1 && str:
			m.MessageId = string(f.B)
		case f.Num == 2 && str:
			m.SessionId = string(f.B)
		case f.Num == 3 && str:
			m.PartitionKey = string(f.B)
		case f.Num == 4 && varint:
			m.TtlMs = int64(f.V)
		case f.Num == 5 && varint:
			m.ScheduledEnqueueTimeMs = int64(f.V)
		case f.Num == 6 && f.Typ == protowire.BytesType:
			m.Header = f.B
		case f.Num == 7 && f.Typ == protowire.BytesType:
			m.Annotations = f.B
		case f.Num == 8 && f.Typ == protowire.BytesType:
			m.Bare = f.B
		case f.Num == 9 && f.Typ == protowire.BytesType:
			m.StagedBody = f.B
		case f.Num == 10 && varint:
			m.StagedLength = f.V
		case f.Num == 11 && varint:
			m.StagedCrc = uint32(f.V) // as proto truncates a uint32
		case f.Num == 12 && f.Typ == protowire.BytesType:
			// A send to a topic: the view its rules read.
			if views != nil && parseFilterView(f.B, nil) {
				m.FilterView, views[m] = undecodedView, f.B
			} else if m.FilterView, ok = aliasFilterView(f.B); !ok {
				return nil, false
			}
		case f.Num == 40 && f.Typ == protowire.BytesType:
			m.Forwarded = new(partitionpb.ForwardOrigin)
			if proto.Unmarshal(f.B, m.Forwarded) != nil {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return m, true
}

// aliasFilterView decodes a FilterView by hand: every replica decodes one
// per message sent to a topic, and proto.Unmarshal's reflective walk of
// its map was a large part of a topic send's apply
// (BenchmarkApplyPublish). It gives
// up on what proto would merge or keep (a field twice, a key twice, an
// unknown field, a value with two kinds).
func aliasFilterView(p []byte) (*partitionpb.FilterView, bool) {
	v := new(partitionpb.FilterView)
	if !parseFilterView(p, v) {
		return nil, false
	}
	return v, true
}

// Filter views left in the entry.
//
// A replica that takes the leader's plan of a send to a topic (plan.go)
// reads no message's view unless a rule's action runs on it, yet decoding
// the views was a tenth of a topic send's apply (BenchmarkApplyPublish).
// So the apply path decodes an entry with lazyViews: a view that
// parseFilterView accepts without building it stays in the entry, the
// message's FilterView is undecodedView, and applier.viewOf decodes it
// when it is read, to what aliasFilterView would have given then: the
// entry decodes to the same batch either way.

// undecodedView marks a message whose view is still in the entry; it is
// never changed, and DecodeBatch never returns it.
var undecodedView = new(partitionpb.FilterView)

// lazyViews holds the undecoded views of an entry's messages.
type lazyViews map[*partitionpb.NewMessage][]byte

// maxLazyProperties bounds the properties of a view left undecoded:
// checking its keys unique without a map takes a comparison per pair.
const maxLazyProperties = 16

// parseFilterView decodes p into v as aliasFilterView does; with v nil it
// only says whether aliasFilterView would decode p, or false if p has
// more than maxLazyProperties properties.
func parseFilterView(p []byte, v *partitionpb.FilterView) bool {
	var seen wire.Set
	var keys [maxLazyProperties][]byte // check only: the keys so far
	nkeys := 0
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok || f.Typ != protowire.BytesType {
			return false
		}
		p = rest
		if f.Num == 7 {
			k, rv, ok := aliasProperty(f.B, v != nil)
			if !ok {
				return false
			}
			if v == nil {
				if nkeys == len(keys) || slices.ContainsFunc(keys[:nkeys], func(x []byte) bool { return bytes.Equal(x, k) }) {
					return false
				}
				keys[nkeys] = k
				nkeys++
				continue
			}
			if v.Properties == nil {
				v.Properties = make(map[string]*placementpb.RuleValue)
			}
			if _, twice := v.Properties[string(k)]; twice {
				return false
			}
			v.Properties[string(k)] = rv
			continue
		}
		if !seen.First(f.Num) || !utf8.Valid(f.B) || f.Num < 1 || f.Num > 6 {
			return false
		}
		if v == nil {
			continue
		}
		switch f.Num {
		case 1:
			v.CorrelationId = string(f.B)
		case 2:
			v.To = string(f.B)
		case 3:
			v.ReplyTo = string(f.B)
		case 4:
			v.Subject = string(f.B)
		case 5:
			v.ContentType = string(f.B)
		case 6:
			v.ReplyToSessionId = string(f.B)
		}
	}
	return true
}

// viewOf is message nm's filter view, decoded from the entry if it was
// left there (lazyViews).
func (a *applier) viewOf(nm *partitionpb.NewMessage) *partitionpb.FilterView {
	if nm.FilterView != undecodedView {
		return nm.FilterView
	}
	v, ok := aliasFilterView(a.views[nm])
	if !ok {
		// parseFilterView accepted it: unreachable. proto.Unmarshal
		// decodes what the fast path does.
		v = new(partitionpb.FilterView)
		_ = proto.Unmarshal(a.views[nm], v)
	}
	nm.FilterView = v
	return v
}

// aliasProperty decodes one entry of FilterView.properties: its key (1)
// and its value (2), a RuleValue of exactly one kind. Unless build, it
// only checks the value and returns none.
func aliasProperty(p []byte, build bool) ([]byte, *placementpb.RuleValue, bool) {
	var key, val []byte
	var seen wire.Set
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok || f.Typ != protowire.BytesType || !seen.First(f.Num) {
			return nil, nil, false
		}
		p = rest
		switch {
		case f.Num == 1 && utf8.Valid(f.B):
			key = f.B
		case f.Num == 2:
			val = f.B
		default:
			return nil, nil, false
		}
	}
	if val == nil {
		return nil, nil, false
	}
	num, typ, n := protowire.ConsumeTag(val)
	if n < 0 {
		return nil, nil, false
	}
	val = val[n:]
	var rv *placementpb.RuleValue
	if build {
		rv = new(placementpb.RuleValue)
	}
	switch {
	case num == 1 && typ == protowire.BytesType:
		b, n := protowire.ConsumeBytes(val)
		if n < 0 || !utf8.Valid(b) {
			return nil, nil, false
		}
		if val = val[n:]; build {
			rv.Value = &placementpb.RuleValue_StringValue{StringValue: string(b)}
		}
	case num == 3 && typ == protowire.Fixed64Type:
		x, n := protowire.ConsumeFixed64(val)
		if n < 0 {
			return nil, nil, false
		}
		if val = val[n:]; build {
			rv.Value = &placementpb.RuleValue_DoubleValue{DoubleValue: math.Float64frombits(x)}
		}
	case typ == protowire.VarintType && num >= 2 && num <= 6 && num != 3:
		x, n := protowire.ConsumeVarint(val)
		if n < 0 {
			return nil, nil, false
		}
		val = val[n:]
		if !build {
			break
		}
		switch num {
		case 2:
			rv.Value = &placementpb.RuleValue_LongValue{LongValue: int64(x)}
		case 4:
			rv.Value = &placementpb.RuleValue_BoolValue{BoolValue: x != 0}
		case 5:
			rv.Value = &placementpb.RuleValue_TimestampMs{TimestampMs: int64(x)}
		case 6:
			rv.Value = &placementpb.RuleValue_DurationMs{DurationMs: int64(x)}
		}
	default:
		return nil, nil, false
	}
	if len(val) > 0 {
		return nil, nil, false // a second kind, or a field proto keeps unknown
	}
	return key, rv, true
}
