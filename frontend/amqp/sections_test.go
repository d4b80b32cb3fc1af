package amqp

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func encodeMessage(t testing.TB, m *Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSectionsOffsets: each section's offset is where its bytes start in
// the message.
func TestSectionsOffsets(t *testing.T) {
	payload := encodeMessage(t, &Message{
		Header:                &Header{Durable: true},
		Properties:            &Properties{MessageID: "m"},
		ApplicationProperties: Map{{Key: "k", Value: "v"}},
		Data:                  [][]byte{[]byte("a"), []byte("b")},
	})
	secs, err := Sections(payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{SectionHeader, SectionProperties, SectionApplicationProperties, SectionData, SectionData}
	off := 0
	for i, s := range secs {
		if i >= len(want) || s.Descriptor != want[i] {
			t.Fatalf("section %d is 0x%x, want the sequence %x", i, s.Descriptor, want)
		}
		if s.Offset != off || !bytes.Equal(payload[s.Offset:s.Offset+len(s.Raw)], s.Raw) {
			t.Errorf("section %d at offset %d, want %d", i, s.Offset, off)
		}
		off += len(s.Raw)
	}
	if body, err := secs[4].Data(); err != nil || string(body) != "b" {
		t.Errorf("second data section holds %q, %v", body, err)
	}
	if _, err := secs[1].Data(); !errors.Is(err, errDecode) {
		t.Errorf("Data of a properties section: %v, want a decode error", err)
	}
}

// TestAppendWithSection: a section is replaced where it stands, added
// where the spec's order puts it, or removed; the others keep their bytes.
func TestAppendWithSection(t *testing.T) {
	base := Message{
		Header:                &Header{Durable: true},
		Properties:            &Properties{MessageID: "m"},
		ApplicationProperties: Map{{Key: "k", Value: "v"}},
		Data:                  [][]byte{[]byte("body")},
	}
	for _, tc := range []struct {
		name string
		desc uint64
		with Message // holds the new section, or not: removed
		want func(m *Message)
	}{
		{"replace properties", SectionProperties, Message{Properties: &Properties{MessageID: "n", Subject: "s"}},
			func(m *Message) { m.Properties = &Properties{MessageID: "n", Subject: "s"} }},
		{"replace application-properties", SectionApplicationProperties, Message{ApplicationProperties: Map{{Key: "a", Value: int64(1)}}},
			func(m *Message) { m.ApplicationProperties = Map{{Key: "a", Value: int64(1)}} }},
		{"add message-annotations between header and properties", SectionMessageAnnotations, Message{MessageAnnotations: Map{{Key: Symbol("x-opt-a"), Value: "b"}}},
			func(m *Message) { m.MessageAnnotations = Map{{Key: Symbol("x-opt-a"), Value: "b"}} }},
		{"add a footer last", SectionFooter, Message{Footer: Map{{Key: Symbol("f"), Value: "g"}}},
			func(m *Message) { m.Footer = Map{{Key: Symbol("f"), Value: "g"}} }},
		{"remove the header", SectionHeader, Message{}, func(m *Message) { m.Header = nil }},
		{"remove application-properties", SectionApplicationProperties, Message{}, func(m *Message) { m.ApplicationProperties = nil }},
		{"remove what is not there", SectionFooter, Message{}, func(*Message) {}},
	} {
		payload := encodeMessage(t, &base)
		secs, err := Sections(payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendWithSection([]byte("prefix"), secs, tc.desc, &tc.with)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := base
		tc.want(&want)
		if w := append([]byte("prefix"), encodeMessage(t, &want)...); !bytes.Equal(got, w) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, got, w)
		}
	}
	secs, _ := Sections(encodeMessage(t, &base), nil)
	for _, desc := range []uint64{SectionData, SectionAMQPSequence, 0x69, 0x79} {
		if _, err := AppendWithSection(nil, secs, desc, &Message{}); err == nil || !strings.Contains(err.Error(), "at most once") {
			t.Errorf("section 0x%x: %v, want a refusal", desc, err)
		}
	}
}

// TestAppendWithSectionOutOfOrder: in a message whose sections are out of
// order, the section that is there is the one replaced, wherever it is.
func TestAppendWithSectionOutOfOrder(t *testing.T) {
	data := encodeMessage(t, &Message{Data: [][]byte{[]byte("x")}})
	props := encodeMessage(t, &Message{ApplicationProperties: Map{{Key: "a", Value: "b"}}})
	secs, err := Sections(append(append([]byte{}, data...), props...), nil)
	if err != nil {
		t.Fatal(err)
	}
	with := Message{ApplicationProperties: Map{{Key: "c", Value: "d"}}}
	got, err := AppendWithSection(nil, secs, SectionApplicationProperties, &with)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, data...), encodeMessage(t, &with)...); !bytes.Equal(got, want) {
		t.Errorf("got % x\nwant % x", got, want)
	}
}

// BenchmarkAppendWithSection: a 1 KiB message's application-properties
// rewritten, as a dead-lettered message's are on every delivery.
func BenchmarkAppendWithSection(b *testing.B) {
	payload := encodeMessage(b, &Message{
		Properties:            &Properties{MessageID: "0123456789abcdef"},
		ApplicationProperties: Map{{Key: "k", Value: "v"}},
		Data:                  [][]byte{bytes.Repeat([]byte{'x'}, 1024)},
	})
	var secs [8]Section
	with := Message{ApplicationProperties: Map{{Key: "k", Value: "v"}, {Key: "DeadLetterReason", Value: "r"}}}
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		s, err := Sections(payload, secs[:0])
		if err != nil {
			b.Fatal(err)
		}
		if buf, err = AppendWithSection(buf[:0], s, SectionApplicationProperties, &with); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzAppendWithSection: for any message that splits and any section a
// message holds at most once, setting that section gives a message that
// splits into the same sections with only that one changed: replaced where
// it stood, added before the first section ordered after it, or removed.
// A message that decoded decodes again, to the same message with that
// section changed.
func FuzzAppendWithSection(f *testing.F) {
	f.Add(testMessage("hello"), uint8(3), "x")
	f.Add(testMessage("hello"), uint8(4+9), "")
	f.Add(encodeMessage(f, &Message{Header: &Header{}, Footer: Map{{Key: Symbol("f"), Value: "g"}}, Value: "v", HasValue: true}), uint8(2), "y")
	f.Add(encodeMessage(f, &Message{Properties: &Properties{To: "q"}, Sequence: [][]any{{"a"}}}), uint8(7), "z")
	f.Fuzz(func(t *testing.T, payload []byte, sel uint8, text string) {
		in, err := Sections(payload, nil)
		if err != nil {
			return
		}
		desc := SectionHeader + uint64(sel%9)
		with := Message{}
		if sel/9%2 == 0 { // else the section is removed
			setSection(&with, fuzzSection(desc, strings.ToValidUTF8(text, "?")), desc)
		}
		out, err := AppendWithSection(nil, in, desc, &with)
		if desc == SectionData || desc == SectionAMQPSequence {
			if err == nil {
				t.Fatalf("set a section 0x%x, which may repeat", desc)
			}
			return
		}
		if err != nil {
			t.Fatalf("setting section 0x%x of % x: %v", desc, payload, err)
		}
		got, err := Sections(out, nil)
		if err != nil {
			t.Fatalf("% x with section 0x%x set does not split: %v\n% x", payload, desc, err, out)
		}
		newSec := encodeMessage(t, &with)
		iIn, iGot := firstOf(in, desc), firstOf(got, desc)
		switch {
		case len(newSec) == 0 && iIn >= 0 && count(got, desc) != count(in, desc)-1,
			len(newSec) == 0 && iIn < 0 && count(got, desc) != 0:
			t.Fatalf("section 0x%x not removed from % x: % x", desc, payload, out)
		case len(newSec) > 0 && (iGot < 0 || !bytes.Equal(got[iGot].Raw, newSec)):
			t.Fatalf("section 0x%x not set in % x: % x", desc, payload, out)
		case len(newSec) > 0 && iIn >= 0 && iGot != iIn:
			t.Fatalf("section 0x%x moved from %d to %d", desc, iIn, iGot)
		case len(newSec) > 0 && iIn < 0 && !inOrder(got, iGot):
			t.Fatalf("section 0x%x added at %d, out of order: % x", desc, iGot, out)
		}
		// A malformed message may hold the section twice; setting or
		// removing it leaves at most one, and every other section as it was.
		a, b := without(in, iIn), without(got, iGot)
		if count(in, desc) > 1 {
			a, b = withoutAll(in, desc), withoutAll(got, desc)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("other sections changed:\n% x\n% x", a, b)
		}
		var mIn, mOut, mNew Message
		if mIn.Decode(payload) != nil || mNew.Decode(newSec) != nil {
			return
		}
		if desc == SectionAMQPValue && (mIn.Data != nil || mIn.Sequence != nil) && with.HasValue {
			return // a value added to a body of data or sequences
		}
		if err := mOut.Decode(out); err != nil {
			t.Fatalf("% x decodes, with section 0x%x set it does not: %v", payload, desc, err)
		}
		setSection(&mIn, &mNew, desc)
		if !reflect.DeepEqual(mIn, mOut) {
			t.Fatalf("with section 0x%x set, decoded\n%#v\nwant\n%#v", desc, mOut, mIn)
		}
	})
}

// fuzzSection returns a message holding a section of descriptor desc
// made from text.
func fuzzSection(desc uint64, text string) *Message {
	m := Map{{Key: Symbol("k"), Value: text}}
	switch desc {
	case SectionHeader:
		return &Message{Header: &Header{Priority: 4, DeliveryCount: uint32(len(text))}}
	case SectionProperties:
		return &Message{Properties: &Properties{Subject: text}}
	case SectionApplicationProperties:
		return &Message{ApplicationProperties: Map{{Key: "k", Value: text}}}
	case SectionAMQPValue:
		return &Message{Value: text, HasValue: true}
	}
	return &Message{DeliveryAnnotations: m, MessageAnnotations: m, Footer: m}
}

// setSection sets dst's section of descriptor desc to src's.
func setSection(dst, src *Message, desc uint64) {
	switch desc {
	case SectionHeader:
		dst.Header = src.Header
	case SectionDeliveryAnnotations:
		dst.DeliveryAnnotations = src.DeliveryAnnotations
	case SectionMessageAnnotations:
		dst.MessageAnnotations = src.MessageAnnotations
	case SectionProperties:
		dst.Properties = src.Properties
	case SectionApplicationProperties:
		dst.ApplicationProperties = src.ApplicationProperties
	case SectionAMQPValue:
		dst.Value, dst.HasValue = src.Value, src.HasValue
	case SectionFooter:
		dst.Footer = src.Footer
	}
}

func firstOf(secs []Section, desc uint64) int {
	for i, s := range secs {
		if s.Descriptor == desc {
			return i
		}
	}
	return -1
}

func count(secs []Section, desc uint64) int {
	n := 0
	for _, s := range secs {
		if s.Descriptor == desc {
			n++
		}
	}
	return n
}

// inOrder reports whether the section at i has only sections ordered
// before it before it, and one ordered after it (if any) right after it.
func inOrder(secs []Section, i int) bool {
	for _, s := range secs[:i] {
		if s.Descriptor >= secs[i].Descriptor {
			return false
		}
	}
	return i+1 == len(secs) || secs[i+1].Descriptor > secs[i].Descriptor
}

// without returns the sections' bytes but the one at i (none if i < 0).
// withoutAll returns the sections that are not of descriptor desc.
func withoutAll(secs []Section, desc uint64) [][]byte {
	var out [][]byte
	for _, s := range secs {
		if s.Descriptor != desc {
			out = append(out, s.Raw)
		}
	}
	return out
}

func without(secs []Section, i int) [][]byte {
	var out [][]byte
	for j, s := range secs {
		if j != i {
			out = append(out, s.Raw)
		}
	}
	return out
}
