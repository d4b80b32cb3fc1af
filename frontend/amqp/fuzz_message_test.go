package amqp

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// FuzzSkip: skip never panics, fails only with errDecode, and agrees with
// value about where a value ends: whatever value decodes, skip consumes
// exactly, so that a section kept undecoded is as well-formed (and as
// shallow) as one decoded. skip may accept more (it does not look inside
// strings, booleans or chars), never less.
func FuzzSkip(f *testing.F) {
	for _, v := range sampleValues() {
		f.Add(mustEncode(f, v))
	}
	for _, enc := range validEncodings(f) {
		f.Add(enc)
	}
	f.Add(nestedLists(maxNesting + 1))
	f.Add(nestedMaps(maxNesting))
	f.Add(nestedArrays(maxNesting + 1))
	f.Add(unhex("e0 06 02 00 53 01 45 45"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds := decoder{b: data}
		serr := ds.skip()
		if serr != nil && !errors.Is(serr, errDecode) {
			t.Fatalf("skip error %v does not wrap errDecode", serr)
		}
		if ds.depth != 0 {
			t.Fatalf("skip left depth %d", ds.depth)
		}
		dv := decoder{b: data}
		if _, err := dv.value(); err != nil {
			return
		}
		if serr != nil {
			t.Fatalf("value decodes % x but skip fails: %v", data, serr)
		}
		if ds.off != dv.off {
			t.Fatalf("value consumes %d bytes of % x, skip %d", dv.off, data, ds.off)
		}
	})
}

// FuzzSections: splitting a message into sections never panics, fails only
// with errDecode, and the sections cover the payload exactly, in order. A
// message that decodes also splits.
func FuzzSections(f *testing.F) {
	f.Add(testMessage("hello"))
	f.Add(append(testMessage("x"), appendBinary(appendDescriptor(nil, SectionData), []byte("y"))...))
	deep := append(appendDescriptor(nil, SectionAMQPValue), nestedLists(maxNesting+1)...)
	f.Add(deep)
	m := Message{
		MessageAnnotations:    Map{{Key: Symbol("x-opt-sequence-number"), Value: int64(7)}},
		ApplicationProperties: Map{{Key: "k", Value: []any{int64(1), "s"}}},
		Value:                 Map{{Key: "a", Value: []any{Map{}}}},
		HasValue:              true,
	}
	if enc, err := m.Append(nil); err == nil {
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		secs, err := Sections(payload, nil)
		if err != nil {
			if !errors.Is(err, errDecode) {
				t.Fatalf("error %v does not wrap errDecode", err)
			}
			var m Message
			if m.Decode(payload) == nil {
				t.Fatalf("% x decodes as a message but does not split: %v", payload, err)
			}
			return
		}
		var joined []byte
		for _, s := range secs {
			joined = append(joined, s.Raw...)
		}
		if !bytes.Equal(joined, payload) {
			t.Fatalf("sections do not cover the payload:\n% x\n% x", joined, payload)
		}
	})
}

// FuzzCheckApplicationProperties: the checker never panics, fails only
// with errDecode, and agrees with Decode: it accepts exactly the
// application-properties sections that decode to string keys and simple
// values.
func FuzzCheckApplicationProperties(f *testing.F) {
	for _, m := range []Map{
		{{Key: "s", Value: "x"}, {Key: "i", Value: int64(1)}, {Key: "t", Value: time.UnixMilli(1)}},
		{{Key: "d", Value: Described{Descriptor: Symbol("x"), Value: int64(1)}}, {Key: "u", Value: UUID{}}},
		{{Key: "l", Value: []any{"a"}}, {Key: Symbol("k"), Value: Map{}}},
	} {
		f.Add(appProps(f, m))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := CheckApplicationProperties(raw)
		if err != nil && !errors.Is(err, errDecode) {
			t.Fatalf("error %v does not wrap errDecode", err)
		}
		var m Message
		derr := m.Decode(raw)
		secs, serr := Sections(raw, nil)
		decodes := derr == nil && serr == nil && len(secs) == 1 && secs[0].Descriptor == SectionApplicationProperties && simpleProps(m.ApplicationProperties)
		if (err == nil) != decodes {
			t.Fatalf("% x: checker says %v, Decode %v (sections %d, %v) with %#v", raw, err, derr, len(secs), serr, m.ApplicationProperties)
		}
	})
}

// simpleProps reports whether every key is a string and every value of a
// simple type (or a described simple value).
func simpleProps(m Map) bool {
	for _, p := range m {
		if _, ok := p.Key.(string); !ok {
			return false
		}
		v := p.Value
		if d, ok := v.(Described); ok {
			v = d.Value
		}
		switch v.(type) {
		case nil, bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float32, float64,
			Decimal32, Decimal64, Decimal128, Char, time.Time, UUID, []byte, string, Symbol:
		default:
			return false
		}
	}
	return true
}
