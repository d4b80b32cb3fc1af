package partition_test

import (
	"bytes"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// sized is a message whose bare section is n bytes, numbered i.
func sized(i, n int) *partitionpb.NewMessage {
	b := bytes.Repeat([]byte{byte('a' + i%26)}, n)
	copy(b, fmt.Sprintf("m%d-", i))
	return &partitionpb.NewMessage{MessageId: fmt.Sprint(i), Bare: b}
}

// pageAll pages through an entity partition with req as a client does,
// from the last number it saw plus one, and returns the pages.
func pageAll(t *testing.T, d *pt.Driver, req *partitionpb.PeekRequest) [][]*partitionpb.Message {
	t.Helper()
	var pages [][]*partitionpb.Message
	for from := uint64(0); ; {
		req.FromSequenceNumber = from
		got, err := d.M.PeekBounded(req, d.Now)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return pages
		}
		pages = append(pages, got)
		from = got[len(got)-1].SequenceNumber + 1
		if len(pages) > 100 {
			t.Fatal("paging does not end")
		}
	}
}

// TestPeekBoundedInBytes: a peek stops before the message that would take
// its answer past max_bytes, answers one message larger than the bound
// alone (so that paging moves), and keeps to MaxPeekBytes when no bound is
// asked for: a client paging on from the last number sees every message
// once, whole, with its size.
func TestPeekBoundedInBytes(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	const n, size = 10, 100 << 10
	var want [][]byte
	for i := range n {
		m := sized(i, size)
		want = append(want, m.Bare)
		d.OK(pt.Enqueue(1, 0, m))
	}
	check := func(pages [][]*partitionpb.Message, perPage int) {
		t.Helper()
		i := 0
		for p, page := range pages {
			if p < len(pages)-1 && len(page) != perPage {
				t.Fatalf("page %d holds %d messages, want %d", p, len(page), perPage)
			}
			for _, m := range page {
				if !bytes.Equal(m.Bare, want[i]) || m.Size != int64(size) || m.BodyTruncated {
					t.Fatalf("message %d: %d bytes (size %d, truncated %v), want %d whole", i, len(m.Bare), m.Size, m.BodyTruncated, size)
				}
				i++
			}
		}
		if i != n {
			t.Fatalf("paged through %d messages, want %d", i, n)
		}
	}
	// 350 KiB: three of 100 KiB fit, a fourth would not.
	check(pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100, MaxBytes: 350 << 10}), 3)
	// Exactly three.
	check(pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100, MaxBytes: 3 * size}), 3)
	// A bound below one message: one a page, whole.
	check(pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100, MaxBytes: 1}), 1)
	// The count still bounds it.
	check(pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 2, MaxBytes: 350 << 10}), 2)
	// No bound asked for: all of them, under MaxPeekBytes.
	check(pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100}), n)
}

// TestPeekDefaultBoundNotExceeded: without max_bytes a peek's messages
// stay within MaxPeekBytes (it used to add messages while it held less,
// and so could answer MaxPeekBytes plus one message of any size), and one
// message larger than it is answered alone.
func TestPeekDefaultBoundNotExceeded(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	const size = 3 << 20
	for i := range 3 {
		d.OK(pt.Enqueue(1, 0, sized(i, size)))
	}
	d.OK(pt.Enqueue(1, 0, sized(3, partition.MaxPeekBytes+1)))
	var counts []int
	for _, page := range pageAll(t, d, &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100}) {
		counts = append(counts, len(page))
		var total int
		for _, m := range page {
			total += len(m.Bare)
		}
		if len(page) > 1 && total > partition.MaxPeekBytes {
			t.Fatalf("a page of %d messages holds %d bytes, over %d", len(page), total, partition.MaxPeekBytes)
		}
	}
	if fmt.Sprint(counts) != "[2 1 1]" {
		t.Fatalf("pages of %v messages, want [2 1 1]", counts)
	}
	// The old entry points keep the default.
	if got, err := d.M.Peek(1, 0, main, 0, 100, d.Now); err != nil || len(got) != 2 {
		t.Fatalf("Peek: %d messages, %v; want 2", len(got), err)
	}
}

// amqpBare is the bare message a client would send: properties,
// application properties and body.
func amqpBare(t *testing.T, m *amqp.Message) []byte {
	t.Helper()
	m.Properties = &amqp.MessageProperties{Subject: ptr("subj"), ContentType: ptr("text/plain")}
	m.ApplicationProperties = map[string]any{"color": "red", "n": int64(7)}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// TestPeekBodyPrefix: body_prefix_bytes cuts each message's body to a
// prefix and keeps the rest of the message whole, so that it decodes
// with its properties; the message says it was cut and what its whole
// size is; a message whose body fits is answered byte for byte; the
// answer's bound counts the cut messages. The session peek does the same.
func TestPeekBodyPrefix(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	const prefix = 4096
	big := bytes.Repeat([]byte("0123456789"), 25_000) // 250 kB
	text := strings.Repeat("héllo wörld ", 2000)      // multi-byte characters
	msgs := []*amqp.Message{
		{Data: [][]byte{big}},                    // cut to the prefix
		{Data: [][]byte{big[:100]}},              // whole
		{Data: [][]byte{big[:3000], big[:3000]}}, // the second section cut
		{Value: text},                            // a string value, cut
		{Value: int64(42)},                       // whole
		{Sequence: [][]any{{text}}},              // too large: left out
	}
	var bares [][]byte
	for i, m := range msgs {
		b := amqpBare(t, m)
		bares = append(bares, b)
		d.OK(pt.Enqueue(1, 0, &partitionpb.NewMessage{MessageId: fmt.Sprint(i), SessionId: "s", Bare: b}))
	}
	check := func(got []*partitionpb.Message) {
		t.Helper()
		if len(got) != len(msgs) {
			t.Fatalf("%d messages, want %d", len(got), len(msgs))
		}
		for i, m := range got {
			if m.Size != int64(len(bares[i])) {
				t.Errorf("message %d: size %d, want %d", i, m.Size, len(bares[i]))
			}
			var am amqp.Message
			if err := am.UnmarshalBinary(m.Bare); err != nil {
				t.Fatalf("message %d does not decode: %v", i, err)
			}
			if am.Properties == nil || *am.Properties.Subject != "subj" || am.ApplicationProperties["color"] != "red" || am.ApplicationProperties["n"] != int64(7) {
				t.Errorf("message %d lost its properties: %+v %v", i, am.Properties, am.ApplicationProperties)
			}
			var wantCut bool
			switch i {
			case 0:
				wantCut = true
				if len(am.Data) != 1 || !bytes.Equal(am.Data[0], big[:prefix]) {
					t.Errorf("message 0: body %d sections, want the first %d bytes", len(am.Data), prefix)
				}
			case 1, 4:
				if !bytes.Equal(m.Bare, bares[i]) {
					t.Errorf("message %d changed though it fits", i)
				}
			case 2:
				wantCut = true
				if len(am.Data) != 2 || !bytes.Equal(am.Data[0], big[:3000]) || !bytes.Equal(am.Data[1], big[:prefix-3000]) {
					t.Errorf("message 2: sections of %d bytes", len(am.Data))
				}
			case 3:
				wantCut = true
				s, _ := am.Value.(string)
				if len(s) > prefix || len(s) < prefix-3 || !strings.HasPrefix(text, s) {
					t.Errorf("message 3: a string of %d bytes, want the text's first %d (whole characters)", len(s), prefix)
				}
			case 5:
				wantCut = true
				if len(am.Sequence) != 0 || am.Value != nil || len(am.Data) != 0 {
					t.Errorf("message 5: body left: %v", am.Sequence)
				}
			}
			if m.BodyTruncated != wantCut {
				t.Errorf("message %d: truncated %v, want %v", i, m.BodyTruncated, wantCut)
			}
		}
	}
	req := &partitionpb.PeekRequest{EntityId: 1, MaxCount: 100, BodyPrefixBytes: prefix}
	got, err := d.M.PeekBounded(req, d.Now)
	if err != nil {
		t.Fatal(err)
	}
	check(got)
	req.SessionId = "s"
	if got, err = d.M.PeekBounded(req, d.Now); err != nil {
		t.Fatal(err)
	}
	check(got)

	// The bound counts what is answered: six cut messages fit in 64 KiB,
	// whole they would not.
	req.SessionId, req.MaxBytes = "", 64<<10
	if got, err = d.M.PeekBounded(req, d.Now); err != nil || len(got) != len(msgs) {
		t.Fatalf("cut, bounded: %d messages, %v", len(got), err)
	}
	req.BodyPrefixBytes = 0
	if got, err = d.M.PeekBounded(req, d.Now); err != nil || len(got) != 1 || !bytes.Equal(got[0].Bare, bares[0]) {
		t.Fatalf("whole, bounded: %d messages, %v", len(got), err)
	}
}

// TestCutBodyLeavesOddMessages: what does not parse as sections (a test's
// bare bytes, a symbol descriptor) is answered as it is.
func TestCutBodyLeavesOddMessages(t *testing.T) {
	for _, bare := range [][]byte{
		[]byte("not amqp at all, and longer than the prefix"),
		{0x00, 0xa3, 0x10, 'a', 'm', 'q', 'p'},
		{0x00, 0x53, 0x75, 0xb0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3},
	} {
		if got, cut := partition.CutBody(bare, 4); cut || !bytes.Equal(got, bare) {
			t.Errorf("%q: cut to %q", bare, got)
		}
	}
}

// FuzzCutBody: cutBody never panics and never grows a message; a message
// as go-amqp encodes it still decodes once cut, with the same properties
// and at most the prefix of its data, and a head of it is cut alike or
// said to be too short.
func FuzzCutBody(f *testing.F) {
	for _, m := range []*amqp.Message{
		{Data: [][]byte{[]byte("hello world"), []byte("again")}},
		{Value: "a string value"},
		{Value: []byte{1, 2, 3, 4, 5, 6}},
		{Sequence: [][]any{{int64(1), "two"}}},
		{Value: int64(3), Footer: map[any]any{"k": "v"}},
	} {
		m.Properties = &amqp.MessageProperties{Subject: ptr("s")}
		m.ApplicationProperties = map[string]any{"a": int32(1)}
		b, err := m.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(3), uint32(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, bare []byte, prefix uint16, h uint32) {
		p := int(prefix) + 1
		got, cut := partition.CutBody(bare, p)
		if len(got) > len(bare) || !cut && !bytes.Equal(got, bare) {
			t.Fatalf("%x cut to %x (%v)", bare, got, cut)
		}
		// The rest holds for a message as go-amqp encodes it. Of other
		// bytes go-amqp decodes some that the cut reads otherwise (it
		// reads a list or map by its count, the cut skips it by its
		// size): a preview of such a message may not decode.
		var in amqp.Message
		if !decodes(&in, bare) {
			return
		}
		if again, err := in.MarshalBinary(); err != nil || !bytes.Equal(again, bare) {
			return
		}
		var out amqp.Message
		if err := out.UnmarshalBinary(got); err != nil {
			t.Fatalf("%x decodes, cut to %x it does not: %v", bare, got, err)
		}
		if !reflect.DeepEqual(in.Properties, out.Properties) || !reflect.DeepEqual(in.ApplicationProperties, out.ApplicationProperties) {
			t.Fatalf("properties changed: %v %v, then %v %v", in.Properties, in.ApplicationProperties, out.Properties, out.ApplicationProperties)
		}
		var body int
		for _, d := range out.Data {
			body += len(d)
		}
		if body > p {
			t.Fatalf("%d bytes of data kept, prefix %d", body, p)
		}
		// Cut from a head of the message (as a staged body's preview
		// reads it), it is cut alike, or the head is too short to say.
		if head := bare[:int(h)%(len(bare)+1)]; len(head) < len(bare) {
			if hgot, hcut, ok := partition.CutHead(head, false, p); ok && (hcut != cut || !bytes.Equal(hgot, got)) {
				t.Fatalf("%x cut to %x (%v), its first %d bytes to %x (%v)", bare, got, cut, len(head), hgot, hcut)
			}
		}
	})
}

// TestPeekPreviewOfStagedBody: a preview of a staged bare message (here
// 24 MiB, in chunks of 1 MiB) reads only the chunks that hold its start:
// what the peek allocates is a small part of the message, while a whole
// peek reads all of it; the cut message decodes with its properties.
func TestPeekPreviewOfStagedBody(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	body := bytes.Repeat([]byte("staged "), 24<<20/7)
	bare := amqpBare(t, &amqp.Message{Data: [][]byte{body}})
	cmds, m := pt.Stage(1, 0, blobID(9), bare, 1<<20)
	for _, c := range cmds {
		d.OK(c)
	}
	d.OK(pt.Enqueue(1, 0, m))
	allocated := func(req *partitionpb.PeekRequest) ([]*partitionpb.Message, uint64) {
		t.Helper()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := d.M.PeekBounded(req, d.Now)
		runtime.ReadMemStats(&after)
		if err != nil || len(got) != 1 {
			t.Fatalf("peek: %d messages, %v", len(got), err)
		}
		return got, after.TotalAlloc - before.TotalAlloc
	}
	got, cost := allocated(&partitionpb.PeekRequest{EntityId: 1, MaxCount: 10, BodyPrefixBytes: 4096})
	var am amqp.Message
	if err := am.UnmarshalBinary(got[0].Bare); err != nil || len(am.Data) != 1 || !bytes.Equal(am.Data[0], body[:4096]) || am.ApplicationProperties["color"] != "red" {
		t.Fatalf("the preview: %v, %d sections", err, len(am.Data))
	}
	if !got[0].BodyTruncated || got[0].Size != int64(len(bare)) {
		t.Fatalf("truncated %v, size %d, want true and %d", got[0].BodyTruncated, got[0].Size, len(bare))
	}
	whole, wholeCost := allocated(&partitionpb.PeekRequest{EntityId: 1, MaxCount: 10})
	if !bytes.Equal(whole[0].Bare, bare) {
		t.Fatal("the whole peek differs from what was sent")
	}
	t.Logf("a preview allocated %d KiB, a whole peek %d KiB", cost>>10, wholeCost>>10)
	if cost > 4<<20 || wholeCost < uint64(len(bare)) {
		t.Fatalf("a preview allocated %d bytes, a whole peek %d, of a message of %d", cost, wholeCost, len(bare))
	}
}

// decodes reports whether go-amqp decodes b into m; it panics on some
// bytes (a map key of a list, go-amqp v1.7.0), which do not decode.
func decodes(m *amqp.Message, b []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return m.UnmarshalBinary(b) == nil
}
