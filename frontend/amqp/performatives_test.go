package amqp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"testing"
)

// codec is what every performative struct implements: append writes the
// descriptor and fields, decode reads the fields after the descriptor.
type codec interface {
	append([]byte) []byte
	decode(*decoder) error
}

// composite is a described type whose decode reads its own descriptor
// (source, target, error, delivery states).
type composite interface {
	append([]byte) []byte
	decode(*decoder) error
}

// End and Close share a decoder; these give them the codec shape.
type (
	testEnd   End
	testClose Close
)

func (p *testEnd) append(b []byte) []byte { return appendErrorOnly(b, descEnd, p.Error) }
func (p *testEnd) decode(d *decoder) (err error) {
	p.Error, err = decodeErrorOnly(d)
	return err
}
func (p *testClose) append(b []byte) []byte { return appendErrorOnly(b, descClose, p.Error) }
func (p *testClose) decode(d *decoder) (err error) {
	p.Error, err = decodeErrorOnly(d)
	return err
}

type testError Error

func (e *testError) append(b []byte) []byte { return (*Error)(e).append(b) }
func (e *testError) decode(d *decoder) error {
	v, err := decodeError(d)
	if err == nil {
		*e = testError(*v)
	}
	return err
}

type testState struct{ State DeliveryState }

func (s *testState) append(b []byte) []byte {
	if s.State == nil {
		return appendNull(b)
	}
	return s.State.appendState(b)
}
func (s *testState) decode(d *decoder) (err error) {
	s.State, err = decodeState(d)
	return err
}

// newPerformative returns an empty struct for a frame's descriptor, or nil.
func newPerformative(code uint64) codec {
	switch code {
	case descOpen:
		return new(Open)
	case descBegin:
		return new(Begin)
	case descAttach:
		return new(Attach)
	case descFlow:
		return new(Flow)
	case descTransfer:
		return new(Transfer)
	case descDisposition:
		return new(Disposition)
	case descDetach:
		return new(Detach)
	case descEnd:
		return new(testEnd)
	case descClose:
		return new(testClose)
	case descSASLMechanisms:
		return new(saslMechanisms)
	case descSASLInit:
		return new(saslInit)
	case descSASLOutcome:
		return new(saslOutcome)
	}
	return nil
}

var testErr = &Error{
	Condition:   ErrCondNotFound,
	Description: "The messaging entity 'q' could not be found.",
	Info:        Map{{Symbol("com.microsoft:tracking-id"), "abc"}, {Symbol("retry-after"), uint32(10)}},
}

type samplePerformative struct {
	name string
	code uint64
	p    codec
}

// samplePerformatives are decoded forms: each encodes and decodes back to
// an identical struct.
func samplePerformatives() []samplePerformative {
	selector := Described{uint64(0x0000468c00000004), "color = 'red'"}
	return []samplePerformative{
		{"open minimal", descOpen, &Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16}},
		{"open full", descOpen, &Open{
			ContainerID: "HBQOHlfp8b1CRa25DshyYnRryifPa8BhRJSb7_rxk9HoVt0PwBUMkg", Hostname: "localhost",
			MaxFrameSize: 65536, ChannelMax: 65535, IdleTimeout: 30000,
			OutgoingLocales: []Symbol{"en-US"}, IncomingLocales: []Symbol{"en-US", "de-DE"},
			OfferedCapabilities: []Symbol{"ANONYMOUS-RELAY"}, DesiredCapabilities: []Symbol{"a", "b"},
			Properties: Map{{Symbol("product"), "MSGolangClient"}, {Symbol("version"), "v1.11.0"}, {Symbol("platform"), "linux"}},
		}},
		{"begin", descBegin, &Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 4294967294}},
		{"begin reply", descBegin, &Begin{RemoteChannel: 3, HasRemoteChannel: true, NextOutgoingID: 1, IncomingWindow: 0,
			OutgoingWindow: math.MaxUint32, HandleMax: math.MaxUint32, OfferedCapabilities: []Symbol{"x"},
			DesiredCapabilities: []Symbol{"y", "z"}, Properties: Map{}}},
		{"attach sender", descAttach, &Attach{
			Name: "E4q7BNSltX-aGsRk8dLXqvfUthmdSP0Qgt2dPCfZTot6PBvc8wE8kg", Handle: 0, Role: RoleSender,
			SndSettleMode: ptr(SenderSettleMixed), RcvSettleMode: ptr(ReceiverSettleFirst),
			Source: &Source{},
			Target: &Target{Address: "q", Durable: 2, ExpiryPolicy: "never", Timeout: 60, Dynamic: true,
				DynamicNodeProperties: Map{{Symbol("lifetime-policy"), Described{uint64(0x2b), []any{}}}},
				Capabilities:          []Symbol{"queue"}},
			Unsettled:            Map{{[]byte{1, 2}, Described{uint64(descAccepted), []any{}}}},
			IncompleteUnsettled:  true,
			InitialDeliveryCount: 7,
			MaxMessageSize:       262144,
			OfferedCapabilities:  []Symbol{"com.microsoft:session-filter"},
			DesiredCapabilities:  []Symbol{"a", "b"},
			Properties:           Map{{Symbol("com.microsoft:timeout"), uint32(60000)}, {Symbol("com.microsoft:entity-type"), int32(-1)}},
		}},
		{"attach receiver with filters", descAttach, &Attach{
			Name: "PBAC6x", Handle: 4095, Role: RoleReceiver, RcvSettleMode: ptr(ReceiverSettleSecond),
			Source: &Source{Address: "t/Subscriptions/s", Durable: 1, ExpiryPolicy: "link-detach", Timeout: 5,
				DistributionMode: "move",
				Filter: Map{
					{Symbol("apache.org:selector-filter:string"), selector},
					{Symbol("com.microsoft:session-filter"), Described{Symbol("com.microsoft:session-filter"), "s1"}},
				},
				DefaultOutcome: Described{uint64(descModified), []any{true}},
				Outcomes:       []Symbol{"amqp:accepted:list", "amqp:rejected:list", "amqp:released:list", "amqp:modified:list"},
				Capabilities:   []Symbol{"topic"},
			},
			Target: &Target{},
		}},
		{"attach refused", descAttach, &Attach{Name: "n", Handle: 1, Role: RoleReceiver}},
		{"attach settle modes zero", descAttach, &Attach{Name: "n", Role: RoleSender, SndSettleMode: ptr(SenderSettleUnsettled),
			RcvSettleMode: ptr(ReceiverSettleFirst), Target: &Target{Address: "q"}}},
		{"flow session", descFlow, &Flow{IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000}},
		{"flow link", descFlow, &Flow{NextIncomingID: 0, HasNextIncomingID: true, IncomingWindow: 5000, NextOutgoingID: 0,
			OutgoingWindow: 5000, Handle: 1, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 1000, HasLinkCredit: true}},
		{"flow full", descFlow, &Flow{NextIncomingID: math.MaxUint32, HasNextIncomingID: true, IncomingWindow: 1, NextOutgoingID: 2,
			OutgoingWindow: 3, Handle: 4, HasHandle: true, DeliveryCount: 5, HasDeliveryCount: true, LinkCredit: 0, HasLinkCredit: true,
			Available: 7, HasAvailable: true, Drain: true, Echo: true, Properties: Map{{Symbol("k"), "v"}}}},
		{"transfer first", descTransfer, &Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true, DeliveryTag: make([]byte, 8),
			MessageFormat: 0, HasMessageFormat: true}},
		{"transfer full", descTransfer, &Transfer{Handle: 2, DeliveryID: 99, HasDeliveryID: true, DeliveryTag: bytes.Repeat([]byte{0xee}, 32),
			MessageFormat: 0x80013700, HasMessageFormat: true, Settled: true, More: true, RcvSettleMode: 1, HasRcvSettleMode: true,
			State: Received{SectionNumber: 1, SectionOffset: 1 << 40}, Resume: true, Aborted: true, Batchable: true}},
		{"transfer continuation", descTransfer, &Transfer{Handle: 0, More: true}},
		{"transfer empty tag", descTransfer, &Transfer{Handle: 0, DeliveryID: 1, HasDeliveryID: true, DeliveryTag: []byte{}}},
		{"disposition accepted", descDisposition, &Disposition{Role: RoleReceiver, First: 0, Settled: true, State: Accepted{}}},
		{"disposition range", descDisposition, &Disposition{Role: RoleSender, First: 5, Last: 9, HasLast: true, Settled: true,
			State: Released{}, Batchable: true}},
		{"disposition rejected", descDisposition, &Disposition{Role: RoleReceiver, First: 1, State: Rejected{Error: testErr}}},
		{"disposition rejected bare", descDisposition, &Disposition{Role: RoleReceiver, First: 1, State: Rejected{}}},
		{"disposition modified", descDisposition, &Disposition{Role: RoleReceiver, First: 2, Settled: true, State: Modified{
			DeliveryFailed: true, UndeliverableHere: true,
			MessageAnnotations: Map{{Symbol("x-opt-dead-letter-reason"), "r"}, {Symbol("x-opt-n"), int64(3)}},
		}}},
		{"disposition modified bare", descDisposition, &Disposition{Role: RoleReceiver, First: 2, State: Modified{}}},
		{"disposition received", descDisposition, &Disposition{Role: RoleReceiver, First: 3, State: Received{SectionNumber: 0, SectionOffset: 0}}},
		{"disposition no state", descDisposition, &Disposition{Role: RoleReceiver, First: math.MaxUint32, Settled: true}},
		{"detach", descDetach, &Detach{Handle: 0}},
		{"detach error", descDetach, &Detach{Handle: 3, Closed: true, Error: testErr}},
		{"end", descEnd, &testEnd{}},
		{"end error", descEnd, &testEnd{Error: &Error{Condition: ErrCondWindowViolation}}},
		{"close", descClose, &testClose{}},
		{"close error", descClose, &testClose{Error: &Error{Condition: ErrCondConnectionForced, Description: "bye"}}},
		{"sasl-mechanisms", descSASLMechanisms, &saslMechanisms{Mechanisms: []Symbol{"ANONYMOUS", "MSSBCBS"}}},
		{"sasl-mechanisms one", descSASLMechanisms, &saslMechanisms{Mechanisms: []Symbol{"PLAIN"}}},
		{"sasl-init anonymous", descSASLInit, &saslInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("anonymous"), Hostname: "localhost"}},
		{"sasl-init plain", descSASLInit, &saslInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00pass")}},
		{"sasl-init bare", descSASLInit, &saslInit{Mechanism: "EXTERNAL"}},
		{"sasl-outcome ok", descSASLOutcome, &saslOutcome{Code: saslOK}},
		{"sasl-outcome auth", descSASLOutcome, &saslOutcome{Code: saslAuth, AdditionalData: []byte("why")}},
	}
}

func sampleComposites() []composite {
	var out []composite
	for _, s := range []DeliveryState{Accepted{}, Released{}, Rejected{}, Rejected{Error: testErr}, Modified{},
		Modified{DeliveryFailed: true, MessageAnnotations: Map{}}, Received{SectionNumber: 7, SectionOffset: math.MaxUint64}} {
		out = append(out, &testState{State: s})
	}
	out = append(out,
		&Source{}, &Source{Address: "q", Outcomes: []Symbol{"amqp:accepted:list"}, DefaultOutcome: Described{uint64(descReleased), []any{}}},
		&Target{}, &Target{Address: "q", Durable: 1, ExpiryPolicy: "session-end", Timeout: 1, Dynamic: true, Capabilities: []Symbol{"queue"}},
		(*testError)(testErr), &testError{Condition: "x"},
	)
	return out
}

// decodePerformative decodes a frame body as the performative its
// descriptor names.
func decodePerformative(body []byte) (codec, error) {
	code, d, err := framePerformative(body)
	if err != nil {
		return nil, err
	}
	p := newPerformative(code)
	if p == nil {
		return nil, decodeErrorf("no struct for descriptor 0x%x", code)
	}
	if err := p.decode(&d); err != nil {
		return nil, err
	}
	if _, ok := p.(*Transfer); !ok && d.remaining() != 0 {
		return nil, decodeErrorf("%d bytes after %T", d.remaining(), p)
	}
	return p, nil
}

func TestPerformativeRoundTrip(t *testing.T) {
	for _, tc := range samplePerformatives() {
		t.Run(tc.name, func(t *testing.T) {
			enc := tc.p.append(nil)
			code, _, err := framePerformative(enc)
			if err != nil || code != tc.code {
				t.Fatalf("descriptor 0x%x, %v; want 0x%x", code, err, tc.code)
			}
			got, err := decodePerformative(enc)
			if err != nil {
				t.Fatalf("decode % x: %v", enc, err)
			}
			if !reflect.DeepEqual(got, tc.p) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.p)
			}
			// Every proper prefix is a decode error.
			for n := range len(enc) {
				if _, err := decodePerformative(bytes.Clone(enc[:n])); !errors.Is(err, errDecode) {
					t.Fatalf("prefix %d of % x: %v, want a decode error", n, enc, err)
				}
			}
		})
	}
}

func TestCompositeRoundTrip(t *testing.T) {
	for _, c := range sampleComposites() {
		enc := c.append(nil)
		got := reflect.New(reflect.TypeOf(c).Elem()).Interface().(composite)
		d := decoder{b: enc}
		if err := got.decode(&d); err != nil || d.remaining() != 0 {
			t.Errorf("%T % x: %v", c, enc, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
		}
	}
}

// TestTrailingNullsOmitted checks exact encodings: absent trailing fields
// are left out of the list, and empty lists become list0.
func TestTrailingNullsOmitted(t *testing.T) {
	tests := []struct {
		name string
		p    appender
		hex  string
	}{
		{"open with only container-id", &Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16},
			"00 53 10 c0 04 01 a1 01 63"},
		// Defaults before a present field are sent as explicit values.
		{"open with idle-time-out", &Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16, IdleTimeout: 1},
			"00 53 10 c0 0f 05 a1 01 63 40 70 ff ff ff ff 60 ff ff 52 01"},
		{"begin", &Begin{HandleMax: math.MaxUint32}, "00 53 11 c0 05 04 40 43 43 43"},
		{"flow", &Flow{IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000},
			"00 53 13 c0 0e 04 40 70 00 00 13 88 52 01 70 00 00 13 88"},
		{"transfer continuation", &Transfer{Handle: 0, More: true}, "00 53 14 c0 07 06 43 40 40 40 40 41"},
		{"disposition", &Disposition{Role: RoleReceiver, First: 0, Settled: true, State: Accepted{}},
			"00 53 15 c0 09 05 41 43 40 41 00 53 24 45"},
		{"disposition last equal to first", &Disposition{Role: RoleReceiver, First: 4, Last: 4, HasLast: true},
			"00 53 15 c0 04 02 41 52 04"},
		{"detach", &Detach{Handle: 0}, "00 53 16 c0 02 01 43"},
		{"detach closed", &Detach{Handle: 1, Closed: true}, "00 53 16 c0 04 02 52 01 41"},
		{"end", &testEnd{}, "00 53 17 45"},
		{"close", &testClose{}, "00 53 18 45"},
		{"close error", &testClose{Error: &Error{Condition: "x"}}, "00 53 18 c0 0a 01 00 53 1d c0 04 01 a3 01 78"},
		{"accepted", &testState{Accepted{}}, "00 53 24 45"},
		{"released", &testState{Released{}}, "00 53 26 45"},
		{"rejected", &testState{Rejected{}}, "00 53 25 45"},
		{"modified", &testState{Modified{}}, "00 53 27 45"},
		{"modified undeliverable", &testState{Modified{UndeliverableHere: true}}, "00 53 27 c0 03 02 40 41"},
		{"received", &testState{Received{}}, "00 53 23 c0 03 02 43 44"},
		{"source", &Source{}, "00 53 28 45"},
		{"target", &Target{Address: "q"}, "00 53 29 c0 04 01 a1 01 71"},
		{"attach receiver", &Attach{Name: "n", Role: RoleReceiver, InitialDeliveryCount: 9},
			"00 53 12 c0 06 03 a1 01 6e 43 41"},
		{"attach sender", &Attach{Name: "n", Role: RoleSender},
			"00 53 12 c0 0d 0a a1 01 6e 43 42 40 40 40 40 40 40 43"},
		{"sasl-outcome", &saslOutcome{Code: saslOK}, "00 53 44 c0 03 01 50 00"},
		{"sasl-mechanisms", &saslMechanisms{Mechanisms: []Symbol{"ANONYMOUS"}},
			"00 53 40 c0 18 01 f0 00 00 00 12 00 00 00 01 b3 00 00 00 09 41 4e 4f 4e 59 4d 4f 55 53"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.append(nil)
			if want := unhex(tc.hex); !bytes.Equal(got, want) {
				t.Fatalf("\n got % x\nwant % x", got, want)
			}
		})
	}
}

func TestAttachSettleModes(t *testing.T) {
	for _, tc := range []struct {
		snd, rcv *uint8
		fields   string // the encoded snd and rcv fields
	}{
		{nil, nil, "40 40"},
		{ptr(uint8(0)), nil, "50 00 40"},
		{nil, ptr(uint8(0)), "40 50 00"},
		{ptr(uint8(2)), ptr(uint8(1)), "50 02 50 01"},
	} {
		a := &Attach{Name: "n", Role: RoleReceiver, SndSettleMode: tc.snd, RcvSettleMode: tc.rcv, Source: &Source{}}
		enc := a.append(nil)
		if !bytes.Contains(enc, unhex("a1 01 6e 43 41"+tc.fields)) {
			t.Errorf("settle modes %v/%v encode as % x", tc.snd, tc.rcv, enc)
		}
		got, err := decodePerformative(enc)
		if err != nil {
			t.Fatal(err)
		}
		g := got.(*Attach)
		if !reflect.DeepEqual(g.SndSettleMode, tc.snd) || !reflect.DeepEqual(g.RcvSettleMode, tc.rcv) {
			t.Errorf("settle modes %v/%v decode as %v/%v", tc.snd, tc.rcv, g.SndSettleMode, g.RcvSettleMode)
		}
	}
	// Out of range modes are refused.
	for _, fields := range [][]string{
		{"a1 01 6e", "43", "41", "50 03"},
		{"a1 01 6e", "43", "41", "40", "50 02"},
		{"a1 01 6e", "43", "41", "52 01"}, // a uint is not a ubyte
	} {
		if _, err := decodePerformative(describedList(descAttach, fields...)); !errors.Is(err, errDecode) {
			t.Errorf("attach %v: %v, want a decode error", fields, err)
		}
	}
}

// describedList encodes a described list32 of raw (hex) field encodings.
func describedList(desc uint64, fields ...string) []byte {
	var body []byte
	for _, f := range fields {
		body = append(body, unhex(f)...)
	}
	b := appendDescriptor(nil, desc)
	b = append(b, codeList32, 0, 0, 0, 0, 0, 0, 0, 0)
	putU32(b[len(b)-8:], uint32(4+len(body)))
	putU32(b[len(b)-4:], uint32(len(fields)))
	return append(b, body...)
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

func TestMandatoryFields(t *testing.T) {
	errNoCondition := hexOf(describedList(descError))
	receivedNoOffset := hexOf(describedList(descReceived, "43"))
	tests := []struct {
		name string
		body []byte
	}{
		{"open list0", unhex("00 53 10 45")},
		{"open null container-id", describedList(descOpen, "40", "a1 01 68")},
		{"begin no windows", describedList(descBegin, "40", "43")},
		{"begin null outgoing-window", describedList(descBegin, "40", "43", "43", "40")},
		{"attach no role", describedList(descAttach, "a1 01 61", "43")},
		{"attach null name", describedList(descAttach, "40", "43", "41")},
		{"attach null handle", describedList(descAttach, "a1 01 61", "40", "41")},
		{"flow no outgoing-window", describedList(descFlow, "40", "43", "43")},
		{"transfer list0", unhex("00 53 14 45")},
		{"transfer null handle", describedList(descTransfer, "40", "43")},
		{"disposition no first", describedList(descDisposition, "41")},
		{"disposition null role", describedList(descDisposition, "40", "43")},
		{"detach list0", unhex("00 53 16 45")},
		{"detach error without condition", describedList(descDetach, "43", "41", errNoCondition)},
		{"close error without condition", describedList(descClose, errNoCondition)},
		{"received without section-offset", describedList(descDisposition, "41", "43", "40", "41", receivedNoOffset)},
		{"sasl-init list0", unhex("00 53 41 45")},
		{"sasl-outcome list0", unhex("00 53 44 45")},
		{"sasl-outcome null code", describedList(descSASLOutcome, "40", "a0 00")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decodePerformative(tc.body)
			if !errors.Is(err, errDecode) {
				t.Fatalf("% x: %+v, %v; want a decode error", tc.body, p, err)
			}
		})
	}
}

// TestWrongFieldTypes: a field of the wrong type is a decode error.
func TestWrongFieldTypes(t *testing.T) {
	for name, body := range map[string][]byte{
		"container-id symbol":  describedList(descOpen, "a3 01 63"),
		"max-frame-size long":  describedList(descOpen, "a1 01 63", "40", "55 01"),
		"locales string":       describedList(descOpen, "a1 01 63", "40", "40", "40", "40", "a1 01 78"),
		"properties list":      describedList(descOpen, "a1 01 63", "40", "40", "40", "40", "40", "40", "40", "40", "45"),
		"role ubyte":           describedList(descAttach, "a1 01 61", "43", "50 01"),
		"source not described": describedList(descAttach, "a1 01 61", "43", "41", "40", "40", "45"),
		"source is a target":   describedList(descAttach, "a1 01 61", "43", "41", "40", "40", "00 53 29 45"),
		"tag string":           describedList(descTransfer, "43", "43", "a1 01 74"),
		"state not described":  describedList(descDisposition, "41", "43", "40", "41", "45"),
		"unknown state":        describedList(descDisposition, "41", "43", "40", "41", "00 53 99 45"),
		"error is a map":       describedList(descDetach, "43", "41", "00 53 1d c1 01 00"),
		"fields in a map":      unhex("00 53 16 c1 03 02 43 41"),
		"fields not a list":    unhex("00 53 16 a1 00"),
	} {
		if _, err := decodePerformative(body); !errors.Is(err, errDecode) {
			t.Errorf("%s: %v, want a decode error", name, err)
		}
	}
}

// TestUnknownTrailingFields: a newer peer may send more fields than this
// version of the spec defines; they are skipped.
func TestUnknownTrailingFields(t *testing.T) {
	extra := []string{"a1 03 66 6f 6f", "c0 04 02 50 01 41", "00 53 99 45", "f0 00 00 00 05 00 00 00 00 b3", "40", "83 00 00 00 00 00 00 00 01"}
	tests := []struct {
		body []byte
		want codec
	}{
		{describedList(descDetach, append([]string{"43", "41", "40"}, extra...)...), &Detach{Handle: 0, Closed: true}},
		{describedList(descOpen, append([]string{"a1 01 63", "40", "40", "40", "40", "40", "40", "40", "40", "40"}, extra...)...),
			&Open{ContainerID: "c", MaxFrameSize: math.MaxUint32, ChannelMax: math.MaxUint16}},
		{describedList(descClose, append([]string{"40"}, extra...)...), &testClose{}},
		{describedList(descEnd, append([]string{hexOf(describedList(descError, append([]string{"a3 01 78", "40", "40"}, extra...)...))}, extra...)...),
			&testEnd{Error: &Error{Condition: "x"}}},
		{describedList(descDisposition, "41", "43", "40", "41", hexOf(describedList(descAccepted, extra...)), "40", "41"),
			&Disposition{Role: RoleReceiver, Settled: true, State: Accepted{}}},
		{describedList(descAttach, "a1 01 6e", "43", "41", "40", "40",
			hexOf(describedList(descSource, append([]string{"a1 01 71", "40", "40", "40", "40", "40", "40", "40", "40", "40", "40"}, extra...)...)),
			hexOf(describedList(descTarget, append([]string{"40", "40", "40", "40", "40", "40", "40"}, extra...)...)),
			"40", "40", "40", "40", "40", "40", "40", "a1 01 78"),
			&Attach{Name: "n", Role: RoleReceiver, Source: &Source{Address: "q"}, Target: &Target{}}},
		{describedList(descSASLOutcome, append([]string{"50 00", "40"}, extra...)...), &saslOutcome{}},
	}
	for _, tc := range tests {
		got, err := decodePerformative(tc.body)
		if err != nil {
			t.Errorf("%T with extra fields: %v", tc.want, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("got %+v\nwant %+v", got, tc.want)
		}
	}
	// Skipped fields must still be valid encodings.
	for _, bad := range []string{"57", "a1 09 61", hexOf(nestedDescribed(maxNesting + 1))} {
		if _, err := decodePerformative(describedList(descDetach, "43", "41", "40", bad)); !errors.Is(err, errDecode) {
			t.Errorf("detach with extra field %s: %v, want a decode error", bad, err)
		}
	}
}

// TestFieldListBounds: fields must fill their list exactly.
func TestFieldListBounds(t *testing.T) {
	for name, body := range map[string][]byte{
		"count beyond fields":        unhex("00 53 16 c0 03 03 43 41"),
		"field overruns list":        unhex("00 53 16 c0 02 01 70 00 00 00 01"),
		"bytes left in list":         unhex("00 53 16 c0 04 01 43 41 41"),
		"list beyond frame":          unhex("00 53 16 c0 09 01 43"),
		"list32 count beyond fields": unhex("00 53 16 d0 00 00 00 06 00 00 00 03 43 41"),
	} {
		if _, err := decodePerformative(body); !errors.Is(err, errDecode) {
			t.Errorf("%s: %v, want a decode error", name, err)
		}
	}
}

var symbolicNames = map[uint64]string{
	descOpen: "amqp:open:list", descBegin: "amqp:begin:list", descAttach: "amqp:attach:list",
	descFlow: "amqp:flow:list", descTransfer: "amqp:transfer:list", descDisposition: "amqp:disposition:list",
	descDetach: "amqp:detach:list", descEnd: "amqp:end:list", descClose: "amqp:close:list",
	descSASLMechanisms: "amqp:sasl-mechanisms:list", descSASLInit: "amqp:sasl-init:list", descSASLOutcome: "amqp:sasl-outcome:list",
	descError: "amqp:error:list", descAccepted: "amqp:accepted:list", descRejected: "amqp:rejected:list",
	descReleased: "amqp:released:list", descModified: "amqp:modified:list", descReceived: "amqp:received:list",
	descSource: "amqp:source:list", descTarget: "amqp:target:list",
}

// symbolize rewrites the numeric descriptors of the spec's types in a
// decoded value tree into their symbolic form. Map contents are left alone.
func symbolize(v any) any {
	switch v := v.(type) {
	case Described:
		if c, ok := v.Descriptor.(uint64); ok {
			if name, ok := symbolicNames[c]; ok {
				v.Descriptor = Symbol(name)
			}
		}
		v.Value = symbolize(v.Value)
		return v
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = symbolize(e)
		}
		return out
	}
	return v
}

// TestSymbolicDescriptors: descriptors in symbolic form and in the long
// ulong form decode like the smallulong form.
func TestSymbolicDescriptors(t *testing.T) {
	for _, tc := range samplePerformatives() {
		if tc.name == "attach receiver with filters" {
			continue // its default-outcome is a generic value: it would change
		}
		enc := tc.p.append(nil)
		v, err := decodeOne(enc)
		if err != nil {
			t.Fatalf("%s: generic decode: %v", tc.name, err)
		}
		sym := mustEncode(t, symbolize(v))
		if !bytes.HasPrefix(sym, []byte{codeDescribed, codeSym8}) {
			t.Fatalf("%s: not symbolized: % x", tc.name, sym)
		}
		got, err := decodePerformative(sym)
		if err != nil {
			t.Errorf("%s symbolic % x: %v", tc.name, sym, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.p) {
			t.Errorf("%s symbolic:\n got %+v\nwant %+v", tc.name, got, tc.p)
		}
		long := append([]byte{codeDescribed, codeUlong, 0, 0, 0, 0, 0, 0, 0, byte(tc.code)}, enc[3:]...)
		if got, err := decodePerformative(long); err != nil || !reflect.DeepEqual(got, tc.p) {
			t.Errorf("%s with ulong descriptor: %+v, %v", tc.name, got, err)
		}
	}
	if _, err := decodePerformative(unhex("00 a3 0e 61 6d 71 70 3a 6f 70 65 6e 3a 6c 69 73 78 45")); !errors.Is(err, errDecode) {
		t.Errorf("unknown symbolic descriptor: %v", err)
	}
	if _, _, err := framePerformative(unhex("a3 01 78")); !errors.Is(err, errDecode) {
		t.Errorf("undescribed body: %v", err)
	}
	if _, _, err := framePerformative(nil); !errors.Is(err, errDecode) {
		t.Errorf("empty body: %v", err)
	}
}

func TestTransferDeliveryTagLimit(t *testing.T) {
	for _, n := range []int{0, 1, 32, 33, 255} {
		enc := (&Transfer{Handle: 0, DeliveryID: 1, HasDeliveryID: true, DeliveryTag: make([]byte, n)}).append(nil)
		_, err := decodePerformative(enc)
		if n <= 32 && err != nil {
			t.Errorf("tag of %d bytes: %v", n, err)
		}
		if n > 32 && !errors.Is(err, errDecode) {
			t.Errorf("tag of %d bytes: %v, want a decode error", n, err)
		}
	}
}

// TestTransferPayload: the message payload follows the transfer's fields
// in the frame body; the decoder stops where it begins.
func TestTransferPayload(t *testing.T) {
	msg := testMessage("hello")
	body := append((&Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true, DeliveryTag: []byte{1}}).append(nil), msg...)
	code, d, err := framePerformative(body)
	if err != nil || code != descTransfer {
		t.Fatal(code, err)
	}
	var p Transfer
	if err := p.decode(&d); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body[d.off:], msg) {
		t.Errorf("payload % x, want % x", body[d.off:], msg)
	}
}
