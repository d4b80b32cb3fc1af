package amqp

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// Real frames (go-amqp's and the Azure SDK's field values), error mapping,
// and the frame reader.

// TestGoAmqpFrames decodes the frames go-amqp v1.7.0 sent (fuzz_test.go).
func TestGoAmqpFrames(t *testing.T) {
	var got []codec
	for _, c := range goAmqpChunks() {
		if bytes.HasPrefix(c, []byte("AMQP")) {
			continue
		}
		p, err := decodePerformative(c[8:])
		if err != nil {
			t.Fatalf("frame % x: %v", c, err)
		}
		got = append(got, p)
	}
	if len(got) != 13 {
		t.Fatalf("%d frames", len(got))
	}
	want := []codec{
		&saslInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("anonymous")},
		// go-amqp announces half the idle timeout it was configured with (30s).
		&Open{ContainerID: "capture-client", Hostname: "localhost", MaxFrameSize: 65536, ChannelMax: 65535, IdleTimeout: 15000,
			Properties: Map{{Symbol("product"), "MSGolangClient"}, {Symbol("version"), "v1.11.0"}}},
		&Begin{IncomingWindow: 5000, OutgoingWindow: 5000, HandleMax: 4294967294},
		nil, // attach sender: checked below
		&Transfer{Handle: 0, DeliveryID: 0, HasDeliveryID: true, DeliveryTag: make([]byte, 8), HasMessageFormat: true},
		nil, // attach receiver
		&Flow{HasNextIncomingID: true, IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000, Handle: 1, HasHandle: true,
			DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 1, HasLinkCredit: true},
		&Disposition{Role: RoleReceiver, First: 0, State: Accepted{}},
		&Flow{NextIncomingID: 1, HasNextIncomingID: true, IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000,
			Handle: 1, HasHandle: true, DeliveryCount: 1, HasDeliveryCount: true, LinkCredit: 1, HasLinkCredit: true},
		&Detach{Handle: 1, Closed: true},
		&Detach{Handle: 0, Closed: true},
		&testEnd{},
		&testClose{},
	}
	for i, w := range want {
		if w != nil && !reflect.DeepEqual(got[i], w) {
			t.Errorf("frame %d:\n got %+v\nwant %+v", i, got[i], w)
		}
	}
	snd := got[3].(*Attach)
	if snd.Role != RoleSender || snd.Handle != 0 || *snd.SndSettleMode != SenderSettleMixed || *snd.RcvSettleMode != ReceiverSettleFirst ||
		snd.Source == nil || snd.Target == nil || snd.Target.Address != "q" || len(snd.Name) != 54 {
		t.Errorf("attach sender: %+v", snd)
	}
	rcv := got[5].(*Attach)
	if rcv.Role != RoleReceiver || rcv.Handle != 1 || rcv.SndSettleMode != nil || *rcv.RcvSettleMode != ReceiverSettleSecond ||
		rcv.Source == nil || rcv.Source.Address != "q" || !reflect.DeepEqual(rcv.Target, &Target{}) {
		t.Errorf("attach receiver: %+v source %+v", rcv, rcv.Source)
	}
}

// TestAzureSDKFrames decodes the field lists the Azure Service Bus SDK
// (go-amqp underneath) sends, as captured from a run of the SDK.
func TestAzureSDKFrames(t *testing.T) {
	const linkName = "qNjzI9NYnSBRkKPf0Rj68VJDw4NKVWNbOd_7aAKKmP9cbTU6qzcmLw"
	str8 := func(s string) string { return hexOf(appendString(nil, s)) }
	name := str8(linkName)
	target := func(addr string) string { return hexOf(describedList(descTarget, str8(addr))) }
	source := func(addr string) string { return hexOf(describedList(descSource, str8(addr))) }
	tests := []struct {
		name string
		body []byte
		want codec
	}{
		{"cbs sender", describedList(descAttach, name, "43", "42", "40", "40", "00 53 28 45", target("$cbs"), "40", "40", "43"),
			&Attach{Name: linkName, Role: RoleSender,
				Source: &Source{}, Target: &Target{Address: "$cbs"}}},
		{"cbs receiver", describedList(descAttach, name, "52 01", "41", "50 01", "50 00", source("$cbs"), target("$cbs$$cbs-reply-to-d2dd2e2d")),
			&Attach{Name: linkName, Handle: 1, Role: RoleReceiver,
				SndSettleMode: ptr(SenderSettleSettled), RcvSettleMode: ptr(ReceiverSettleFirst),
				Source: &Source{Address: "$cbs"}, Target: &Target{Address: "$cbs$$cbs-reply-to-d2dd2e2d"}}},
		{"queue sender", describedList(descAttach, name, "43", "42", "50 02", "50 00", "00 53 28 45", target("q"), "40", "40", "43"),
			&Attach{Name: linkName, Role: RoleSender,
				SndSettleMode: ptr(SenderSettleMixed), RcvSettleMode: ptr(ReceiverSettleFirst),
				Source: &Source{}, Target: &Target{Address: "q"}}},
		{"peek-lock receiver", describedList(descAttach, name, "43", "41", "40", "50 01", source("q"), "00 53 29 45"),
			&Attach{Name: linkName, Role: RoleReceiver,
				RcvSettleMode: ptr(ReceiverSettleSecond), Source: &Source{Address: "q"}, Target: &Target{}}},
		{"flow", describedList(descFlow, "43", "70 00 00 13 88", "52 01", "70 00 00 13 88", "52 01", "43", "70 00 00 03 e8"),
			&Flow{HasNextIncomingID: true, IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000, Handle: 1, HasHandle: true,
				HasDeliveryCount: true, LinkCredit: 1000, HasLinkCredit: true}},
		{"complete", describedList(descDisposition, "41", "43", "40", "40", "00 53 24 45"),
			&Disposition{Role: RoleReceiver, State: Accepted{}}},
	}
	for _, tc := range tests {
		got, err := decodePerformative(tc.body)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestAsError(t *testing.T) {
	if e := asError(decodeErrorf("x")); e.Condition != ErrCondDecodeError {
		t.Errorf("decode error → %s", e.Condition)
	}
	if e := asError(testErr); e != testErr {
		t.Errorf("*Error → %v", e)
	}
	if e := asError(io.EOF); e.Condition != ErrCondInternalError {
		t.Errorf("other error → %s", e.Condition)
	}
	if asError(nil) != nil {
		t.Error("nil → non-nil")
	}
	if s := (&Error{Condition: "a"}).Error(); s != "a" {
		t.Error(s)
	}
	if s := Errorf("a", "b %d", 1).Error(); s != "a: b 1" {
		t.Error(s)
	}
}

// Frame reader.

func frameOf(size uint32, doff, typ byte, channel uint16, rest ...byte) []byte {
	b := []byte{byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size), doff, typ, byte(channel >> 8), byte(channel)}
	return append(b, rest...)
}

func TestFrameReader(t *testing.T) {
	ext := frameOf(16, 3, frameTypeAMQP, 0x0102, 0xee, 0xee, 0xee, 0xee, 0x00, 0x53, 0x17, 0x45)
	sasl := rawFrame(frameTypeSASL, 0, []byte{0x00, 0x53, 0x44, 0x45})
	maxed := rawFrame(frameTypeAMQP, 5, bytes.Repeat([]byte{0x40}, 512-8))
	stream := joinChunks([][]byte{convOpen, keepAlive, ext, sasl, maxed})
	fr := newFrameReader(bytes.NewReader(stream), 512)
	want := []frame{
		{typ: frameTypeAMQP, channel: 0, body: convOpen[8:]},
		{typ: frameTypeAMQP, channel: 0, body: []byte{}},
		{typ: frameTypeAMQP, channel: 0x0102, body: []byte{0x00, 0x53, 0x17, 0x45}},
		{typ: frameTypeSASL, channel: 0, body: []byte{0x00, 0x53, 0x44, 0x45}},
		{typ: frameTypeAMQP, channel: 5, body: maxed[8:]},
	}
	for i, w := range want {
		f, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.typ != w.typ || f.channel != w.channel || !bytes.Equal(f.body, w.body) {
			t.Fatalf("frame %d = {%d %d % x}, want {%d %d % x}", i, f.typ, f.channel, f.body, w.typ, w.channel, w.body)
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}

	framing := []struct {
		name string
		data []byte
	}{
		{"size below header", frameOf(7, 2, 0, 0)},
		{"size zero", frameOf(0, 2, 0, 0)},
		{"size above max", frameOf(513, 2, 0, 0, make([]byte, 505)...)},
		{"size huge", frameOf(math.MaxUint32, 2, 0, 0)},
		{"doff 0", frameOf(8, 0, 0, 0)},
		{"doff 1", frameOf(12, 1, 0, 0, 0, 0, 0, 0)},
		{"doff beyond size", frameOf(8, 3, 0, 0)},
		{"doff beyond size 2", frameOf(16, 5, 0, 0, make([]byte, 12)...)},
		{"unknown type", frameOf(8, 2, 2, 0)},
		{"unknown type ff", frameOf(12, 2, 0xff, 0, 0, 0x53, 0x18, 0x45)},
	}
	for _, tc := range framing {
		fr := newFrameReader(bytes.NewReader(tc.data), 512)
		_, err := fr.next()
		var e *Error
		if !errors.As(err, &e) || e.Condition != ErrCondFramingError {
			t.Errorf("%s: %v, want a framing error", tc.name, err)
		}
		if ae := asError(err); ae.Condition != ErrCondFramingError {
			t.Errorf("%s: asError → %s", tc.name, ae.Condition)
		}
	}
	truncated := map[string][]byte{
		"header":         convOpen[:3],
		"body":           convOpen[:len(convOpen)-1],
		"header only":    convOpen[:8],
		"second header":  append(bytes.Clone(keepAlive), 0, 0, 0),
		"second body":    append(bytes.Clone(keepAlive), convOpen[:20]...),
		"extended frame": ext[:12],
	}
	for name, data := range truncated {
		fr := newFrameReader(bytes.NewReader(data), 512)
		var err error
		for err == nil {
			_, err = fr.next()
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("truncated %s: %v, want unexpected EOF", name, err)
		}
	}
	if _, err := newFrameReader(bytes.NewReader(nil), 512).next(); err != io.EOF {
		t.Errorf("empty stream: %v, want EOF", err)
	}
}

// TestFrameReaderProtoHeader: the protocol header that follows the SASL
// exchange is read after the sasl-init frame the reader returned.
func TestFrameReaderProtoHeader(t *testing.T) {
	fr := newFrameReader(bytes.NewReader(joinChunks([][]byte{protoHeaderSASL[:], convSASLInit, protoHeaderAMQP[:], convOpen})), 512)
	for i, step := range []string{"header", "frame", "header", "frame"} {
		if step == "header" {
			h, err := fr.protoHeader()
			if err != nil || !strings.HasPrefix(string(h[:]), "AMQP") {
				t.Fatalf("step %d: header % x, %v", i, h, err)
			}
			continue
		}
		f, err := fr.next()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, err := decodePerformative(f.body); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}
