package amqp

import (
	"bytes"
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// unhex decodes a hex string that may contain spaces and newlines; it
// panics on bad input because the tables below are written by hand.
func unhex(s string) []byte {
	s = strings.Join(strings.Fields(s), "")
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// decodeOne decodes exactly one value that must fill b.
func decodeOne(b []byte) (any, error) {
	d := decoder{b: b}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	if d.remaining() != 0 {
		return nil, decodeErrorf("%d bytes after the value", d.remaining())
	}
	return v, nil
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := appendValue(nil, v)
	if err != nil {
		t.Fatalf("appendValue(%#v): %v", v, err)
	}
	return b
}

func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

var (
	testUUID  = UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	testUUIDx = "123456789abcdef00123456789abcdef"
)

// TestDecodeVectors decodes hand-written encodings of every primitive type
// and every encoding of spec part 1.6 into the Go values of the package
// mapping.
func TestDecodeVectors(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want any
	}{
		{"null", "40", nil},
		{"true", "41", true},
		{"false", "42", false},
		{"boolean 1", "56 01", true},
		{"boolean 0", "56 00", false},
		{"ubyte", "50 ff", uint8(255)},
		{"ushort", "60 12 34", uint16(0x1234)},
		{"uint", "70 00 00 01 00", uint32(256)},
		{"uint max", "70 ff ff ff ff", uint32(math.MaxUint32)},
		{"smalluint", "52 05", uint32(5)},
		{"uint0", "43", uint32(0)},
		{"ulong", "80 01 02 03 04 05 06 07 08", uint64(0x0102030405060708)},
		{"smallulong", "53 ff", uint64(255)},
		{"ulong0", "44", uint64(0)},
		{"byte", "51 ff", int8(-1)},
		{"short", "61 ff fe", int16(-2)},
		{"int", "71 ff ff ff fe", int32(-2)},
		{"int min", "71 80 00 00 00", int32(math.MinInt32)},
		{"smallint", "54 80", int32(-128)},
		{"long", "81 ff ff ff ff ff ff ff fe", int64(-2)},
		{"long max", "81 7f ff ff ff ff ff ff ff", int64(math.MaxInt64)},
		{"smalllong", "55 fb", int64(-5)},
		{"float", "72 3f c0 00 00", float32(1.5)},
		{"float -inf", "72 ff 80 00 00", float32(math.Inf(-1))},
		{"double", "82 40 09 21 fb 54 44 2d 18", math.Pi},
		{"decimal32", "74 01 02 03 04", Decimal32{1, 2, 3, 4}},
		{"decimal64", "84 01 02 03 04 05 06 07 08", Decimal64{1, 2, 3, 4, 5, 6, 7, 8}},
		{"decimal128", "94 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f",
			Decimal128{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
		{"char", "73 00 01 f6 00", Char(0x1f600)},
		{"char max", "73 00 10 ff ff", Char(0x10ffff)},
		{"timestamp", "83 00 00 01 a1 fc 7b 05 aa", ms(1795237283242)},
		{"timestamp epoch", "83 00 00 00 00 00 00 00 00", ms(0)},
		{"timestamp negative", "83 ff ff ff ff ff ff ff ff", ms(-1)},
		{"uuid", "98" + testUUIDx, testUUID},
		{"vbin8", "a0 03 01 02 03", []byte{1, 2, 3}},
		{"vbin32", "b0 00 00 00 02 aa bb", []byte{0xaa, 0xbb}},
		{"str8", "a1 05 68 65 6c 6c 6f", "hello"},
		{"str8 utf-8", "a1 03 c3 a9 21", "é!"},
		{"str8 empty", "a1 00", ""},
		{"str32", "b1 00 00 00 03 61 62 63", "abc"},
		{"sym8", "a3 04 71 75 65 75", Symbol("queu")},
		{"sym32", "b3 00 00 00 01 78", Symbol("x")},
		{"list0", "45", []any{}},
		{"list8", "c0 04 02 50 01 41", []any{uint8(1), true}},
		{"list8 empty", "c0 01 00", []any{}},
		{"list32", "d0 00 00 00 07 00 00 00 02 50 01 41", []any{uint8(1), true}},
		{"list nested", "c0 06 02 45 c0 02 01 40", []any{[]any{}, []any{nil}}},
		{"map8", "c1 09 04 a3 01 61 41 a1 01 62 40", Map{{Symbol("a"), true}, {"b", nil}}},
		{"map8 empty", "c1 01 00", Map{}},
		{"map32", "d1 00 00 00 08 00 00 00 02 50 01 50 02", Map{{uint8(1), uint8(2)}}},
		{"map binary key", "c1 06 02 a0 02 00 ff 41", Map{{[]byte{0, 0xff}, true}}},

		// Arrays: one constructor shared by every element.
		{"array8 sym8", "e0 07 02 a3 02 61 62 01 63", []Symbol{"ab", "c"}},
		{"array32 sym32", "f0 00 00 00 10 00 00 00 02 b3 00 00 00 02 61 62 00 00 00 01 63", []Symbol{"ab", "c"}},
		{"array8 empty symbols", "e0 02 00 a3", []Symbol{}},
		{"array32 empty symbols", "f0 00 00 00 05 00 00 00 00 b3", []Symbol{}},
		{"array8 str8", "e0 07 02 a1 02 68 69 01 21", []string{"hi", "!"}},
		{"array32 str32", "f0 00 00 00 0a 00 00 00 01 b1 00 00 00 01 7a", []string{"z"}},
		{"array long", "e0 0a 01 81 ff ff ff ff ff ff ff fe", []int64{-2}},
		{"array smalllong", "e0 04 02 55 05 fb", []int64{5, -5}},
		{"array int", "e0 06 01 71 00 00 01 00", []int32{256}},
		{"array smallint", "e0 04 02 54 7f 80", []int32{127, -128}},
		{"array ulong", "e0 0a 01 80 00 00 00 00 00 00 01 00", []uint64{256}},
		{"array smallulong", "e0 04 02 53 01 02", []uint64{1, 2}},
		{"array ulong0", "e0 02 02 44", []uint64{0, 0}},
		{"array uint", "e0 06 01 70 00 00 01 00", []uint32{256}},
		{"array smalluint", "e0 04 02 52 00 ff", []uint32{0, 255}},
		{"array uint0", "e0 02 02 43", []uint32{0, 0}},
		{"array uuid", "e0 12 01 98" + testUUIDx, []UUID{testUUID}},
		{"array timestamp", "e0 0a 01 83 00 00 01 a1 fc 7b 05 aa", []time.Time{ms(1795237283242)}},
		{"array vbin8", "e0 06 02 a0 01 aa 01 bb", [][]byte{{0xaa}, {0xbb}}},
		{"array32 vbin32", "f0 00 00 00 0f 00 00 00 02 b0 00 00 00 01 aa 00 00 00 01 bb", [][]byte{{0xaa}, {0xbb}}},
		{"array double", "e0 0a 01 82 3f f0 00 00 00 00 00 00", []float64{1}},
		{"array boolean", "e0 04 02 56 01 00", Array{Constructor: codeBool, Elems: []any{true, false}}},
		{"array true", "e0 02 02 41", Array{Constructor: codeTrue, Elems: []any{true, true}}},
		{"array ubyte", "e0 04 02 50 01 02", Array{Constructor: codeUbyte, Elems: []any{uint8(1), uint8(2)}}},
		{"array null", "e0 02 02 40", Array{Constructor: codeNull, Elems: []any{nil, nil}}},
		{"array described", "e0 09 02 00 53 77 a1 01 61 01 62", Array{
			Descriptor:  uint64(0x77),
			Constructor: codeStr8,
			Elems:       []any{Described{uint64(0x77), "a"}, Described{uint64(0x77), "b"}},
		}},
		{"array described by symbol", "e0 0a 02 00 a3 03 66 6f 6f 50 01 02", Array{
			Descriptor:  Symbol("foo"),
			Constructor: codeUbyte,
			Elems:       []any{Described{Symbol("foo"), uint8(1)}, Described{Symbol("foo"), uint8(2)}},
		}},
		{"array of lists", "e0 08 02 c0 01 00 03 01 50 07", Array{
			Constructor: codeList8,
			Elems:       []any{[]any{}, []any{uint8(7)}},
		}},
		{"array of maps", "e0 06 01 c1 03 02 41 42", Array{Constructor: codeMap8, Elems: []any{Map{{true, false}}}}},
		{"array of arrays", "e0 07 01 e0 04 02 50 01 02", Array{
			Constructor: codeArray8,
			Elems:       []any{Array{Constructor: codeUbyte, Elems: []any{uint8(1), uint8(2)}}},
		}},

		// Described values.
		{"described ulong", "00 53 24 45", Described{uint64(0x24), []any{}}},
		{"described ulong0", "00 44 40", Described{uint64(0), nil}},
		{"described domain ulong", "00 80 00 00 46 8c 00 00 00 04 a1 03 78 3d 31",
			Described{uint64(0x0000468c00000004), "x=1"}},
		{"described symbol", "00 a3 12 61 6d 71 70 3a 61 63 63 65 70 74 65 64 3a 6c 69 73 74 45",
			Described{Symbol("amqp:accepted:list"), []any{}}},
		{"described nested", "00 53 01 00 53 02 40", Described{uint64(1), Described{uint64(2), nil}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeOne(unhex(tc.hex))
			if err != nil {
				t.Fatalf("decode % x: %v", unhex(tc.hex), err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decode % x:\n got %#v\nwant %#v", unhex(tc.hex), got, tc.want)
			}
			// Every decoded value encodes again, and that encoding decodes to
			// the same value (arrays of compact constructors come back
			// widened, so compare the second round with the first).
			enc := mustEncode(t, got)
			again, err := decodeOne(enc)
			if err != nil {
				t.Fatalf("re-decode % x: %v", enc, err)
			}
			if enc2 := mustEncode(t, again); !bytes.Equal(enc, enc2) {
				t.Fatalf("re-encoding is not stable:\n% x\n% x", enc, enc2)
			}
		})
	}
}

// TestEncodeCompact checks that the encoder picks the most compact
// encoding the spec allows.
func TestEncodeCompact(t *testing.T) {
	long := strings.Repeat("x", 256)
	nulls := func(n int) []any { return make([]any, n) }
	tests := []struct {
		name string
		v    any
		hex  string
	}{
		{"null", nil, "40"},
		{"true", true, "41"},
		{"false", false, "42"},
		{"ubyte", uint8(7), "50 07"},
		{"ushort", uint16(0x1234), "60 12 34"},
		{"uint 0", uint32(0), "43"},
		{"uint 5", uint32(5), "52 05"},
		{"uint 255", uint32(255), "52 ff"},
		{"uint 256", uint32(256), "70 00 00 01 00"},
		{"ulong 0", uint64(0), "44"},
		{"ulong 5", uint64(5), "53 05"},
		{"ulong 256", uint64(256), "80 00 00 00 00 00 00 01 00"},
		{"uint as ulong", uint(5), "53 05"},
		{"byte", int8(-1), "51 ff"},
		{"short", int16(-2), "61 ff fe"},
		{"int 5", int32(5), "54 05"},
		{"int -128", int32(-128), "54 80"},
		{"int 127", int32(127), "54 7f"},
		{"int 128", int32(128), "71 00 00 00 80"},
		{"int -129", int32(-129), "71 ff ff ff 7f"},
		{"long 5", int64(5), "55 05"},
		{"long -5", int64(-5), "55 fb"},
		{"long 128", int64(128), "81 00 00 00 00 00 00 00 80"},
		{"long -129", int64(-129), "81 ff ff ff ff ff ff ff 7f"},
		{"int as long", int(-1), "55 ff"},
		{"float", float32(1.5), "72 3f c0 00 00"},
		{"double", float64(1), "82 3f f0 00 00 00 00 00 00"},
		{"char", Char('A'), "73 00 00 00 41"},
		{"timestamp", ms(1795237283242), "83 00 00 01 a1 fc 7b 05 aa"},
		{"uuid", testUUID, "98" + testUUIDx},
		{"decimal32", Decimal32{1, 2, 3, 4}, "74 01 02 03 04"},
		{"binary", []byte{1}, "a0 01 01"},
		{"binary empty", []byte{}, "a0 00"},
		{"binary 255", bytes.Repeat([]byte{7}, 255), "a0 ff" + strings.Repeat("07", 255)},
		{"binary 256", bytes.Repeat([]byte{7}, 256), "b0 00 00 01 00" + strings.Repeat("07", 256)},
		{"string", "hi", "a1 02 68 69"},
		{"string 256", long, "b1 00 00 01 00" + strings.Repeat("78", 256)},
		{"symbol", Symbol("x"), "a3 01 78"},
		{"symbol 256", Symbol(long), "b3 00 00 01 00" + strings.Repeat("78", 256)},
		{"empty list", []any{}, "45"},
		{"small list", []any{true}, "c0 02 01 41"},
		{"list 254 bytes", nulls(254), "c0 ff fe" + strings.Repeat("40", 254)},
		{"list 255 bytes", nulls(255), "d0 00 00 01 03 00 00 00 ff" + strings.Repeat("40", 255)},
		{"empty map", Map{}, "c1 01 00"},
		{"small map", Map{{Symbol("a"), uint32(1)}}, "c1 06 02 a3 01 61 52 01"},
		{"symbol array", []Symbol{"a"}, "f0 00 00 00 0a 00 00 00 01 b3 00 00 00 01 61"},
		{"empty symbol array", []Symbol{}, "f0 00 00 00 05 00 00 00 00 b3"},
		{"long array", []int64{1}, "f0 00 00 00 0d 00 00 00 01 81 00 00 00 00 00 00 00 01"},
		{"bool array", Array{Constructor: codeBool, Elems: []any{true, false}},
			"f0 00 00 00 07 00 00 00 02 56 01 00"},
		{"described", Described{uint64(0x24), []any{}}, "00 53 24 45"},
		{"described symbol", Described{Symbol("amqp:accepted:list"), []any{}},
			"00 a3 12 61 6d 71 70 3a 61 63 63 65 70 74 65 64 3a 6c 69 73 74 45"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mustEncode(t, tc.v)
			if want := unhex(tc.hex); !bytes.Equal(got, want) {
				t.Fatalf("appendValue(%#v):\n got % x\nwant % x", tc.v, got, want)
			}
		})
	}
	// The typed helpers agree with appendValue.
	if got := appendUint(nil, 0); !bytes.Equal(got, []byte{codeUint0}) {
		t.Errorf("appendUint(0) = % x", got)
	}
	if got := appendLong(nil, 5); !bytes.Equal(got, []byte{codeSmallLong, 5}) {
		t.Errorf("appendLong(5) = % x", got)
	}
	if got := appendSymbols(nil, nil); !bytes.Equal(got, []byte{codeNull}) {
		t.Errorf("appendSymbols(nil) = % x", got)
	}
	if got := appendSymbols(nil, []Symbol{"a"}); !bytes.Equal(got, unhex("a3 01 61")) {
		t.Errorf("appendSymbols(one) = % x", got)
	}
}

func TestEncodeUnsupportedType(t *testing.T) {
	for _, v := range []any{struct{}{}, map[int]int{}, make(chan int), []int{1}, Array{Constructor: codeUbyte, Elems: []any{"x"}}} {
		if _, err := appendValue(nil, v); err == nil {
			t.Errorf("appendValue(%T) succeeded", v)
		}
	}
}

// sampleValues covers every Go type of the mapping, edge values and
// nesting; each must survive appendValue → decoder.value unchanged.
func sampleValues() []any {
	return []any{
		nil, true, false,
		uint8(0), uint8(255),
		uint16(0), uint16(math.MaxUint16),
		uint32(0), uint32(1), uint32(255), uint32(256), uint32(math.MaxUint32),
		uint64(0), uint64(255), uint64(256), uint64(math.MaxUint64),
		int8(math.MinInt8), int8(math.MaxInt8),
		int16(math.MinInt16), int16(math.MaxInt16),
		int32(0), int32(-128), int32(127), int32(-129), int32(128), int32(math.MinInt32), int32(math.MaxInt32),
		int64(0), int64(-128), int64(127), int64(math.MinInt64), int64(math.MaxInt64),
		float32(0), float32(-1.25), float32(math.Inf(1)), float32(math.SmallestNonzeroFloat32),
		float64(0), math.Pi, math.Inf(-1), math.MaxFloat64,
		Decimal32{0xff, 1, 2, 3}, Decimal64{1, 2, 3, 4, 5, 6, 7, 8}, Decimal128{15: 1},
		Char(0), Char('é'), Char(0x10ffff),
		ms(0), ms(1795237283242), ms(-62135596800000), ms(253402300799999),
		UUID{}, testUUID,
		[]byte{0}, bytes.Repeat([]byte{0xab}, 300),
		"", "hello", "日本語", strings.Repeat("s", 70000),
		Symbol(""), Symbol("amqp:accepted:list"), Symbol(strings.Repeat("y", 300)),
		[]any{}, []any{nil, true, uint8(1), "x", []any{int64(-1)}},
		Map{}, Map{{Symbol("x-opt-sequence-number"), int64(1)}, {"k", Map{{uint64(1), []any{}}}}},
		Map{{[]byte{1, 2}, "binary key"}, {uint32(7), nil}, {Described{uint64(1), "d"}, int8(3)}},
		Described{uint64(0x70), []any{false, uint8(4)}},
		Described{Symbol("com.microsoft:datetime-offset"), int64(637000000000000000)},
		Described{uint64(0x0000468c00000004), "color = 'red'"},
		[]Symbol{}, []Symbol{"ANONYMOUS", "MSSBCBS", "PLAIN"},
		[]string{}, []string{"a", "", strings.Repeat("b", 300)},
		[][]byte{}, [][]byte{{1}, {2, 3}},
		[]int64{}, []int64{math.MinInt64, -1, 0, math.MaxInt64},
		[]int32{}, []int32{math.MinInt32, 0, math.MaxInt32},
		[]uint64{}, []uint64{0, 1, math.MaxUint64},
		[]uint32{}, []uint32{0, 1, math.MaxUint32},
		[]float64{}, []float64{1.5, math.Inf(1)},
		[]UUID{}, []UUID{testUUID, {}},
		[]time.Time{}, []time.Time{ms(0), ms(1795237283242)},
		Array{Constructor: codeBool, Elems: []any{true, false, true}},
		Array{Constructor: codeUbyte, Elems: []any{uint8(0), uint8(255)}},
		Array{Constructor: codeShort, Elems: []any{int16(-1)}},
		Array{Constructor: codeFloat, Elems: []any{float32(2)}},
		Array{Constructor: codeChar, Elems: []any{Char('a')}},
		Array{Constructor: codeNull, Elems: []any{nil, nil}},
		Array{Constructor: codeList32, Elems: []any{[]any{}, []any{uint8(1), "x"}}},
		Array{Constructor: codeMap32, Elems: []any{Map{}, Map{{Symbol("k"), true}}}},
		Array{Constructor: codeArray32, Elems: []any{[]Symbol{"a"}, []Symbol{}}},
		Array{Descriptor: uint64(0x77), Constructor: codeStr32, Elems: []any{Described{uint64(0x77), "a"}}},
		Array{Descriptor: Symbol("x"), Constructor: codeList32, Elems: []any{Described{Symbol("x"), []any{}}}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, v := range sampleValues() {
		enc := mustEncode(t, v)
		got, err := decodeOne(enc)
		if err != nil {
			t.Errorf("decode(appendValue(%#.60v)) = %v", v, err)
			continue
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("round trip of %T:\n got %#.200v\nwant %#.200v", v, got, v)
		}
	}
}

func TestRoundTripNaN(t *testing.T) {
	for _, v := range []any{float32(math.NaN()), math.NaN(), math.Float64frombits(0x7ff0000000000001)} {
		enc := mustEncode(t, v)
		got, err := decodeOne(enc)
		if err != nil {
			t.Fatal(err)
		}
		if enc2 := mustEncode(t, got); !bytes.Equal(enc, enc2) {
			t.Errorf("NaN bits changed: % x → % x", enc, enc2)
		}
	}
}

// TestEncodeGoMaps: map[string]any and map[Symbol]any encode as maps.
func TestEncodeGoMaps(t *testing.T) {
	got, err := decodeOne(mustEncode(t, map[Symbol]any{"a": int64(1)}))
	if err != nil || !reflect.DeepEqual(got, Map{{Symbol("a"), int64(1)}}) {
		t.Errorf("map[Symbol]any: %#v, %v", got, err)
	}
	got, err = decodeOne(mustEncode(t, map[string]any{"a": "b"}))
	if err != nil || !reflect.DeepEqual(got, Map{{"a", "b"}}) {
		t.Errorf("map[string]any: %#v, %v", got, err)
	}
}

// TestArrayCompactConstructors: a decoded Array whose constructor is a
// compact form (list8, smalluint ...) must encode again even when an
// element no longer fits that form; the encoder widens the constructor.
func TestArrayCompactConstructors(t *testing.T) {
	tests := []struct {
		in   Array
		want Array
	}{
		{
			Array{Constructor: codeList8, Elems: []any{[]any{}, []any{uint8(1)}}},
			Array{Constructor: codeList32, Elems: []any{[]any{}, []any{uint8(1)}}},
		},
		{
			Array{Constructor: codeList0, Elems: []any{[]any{}}},
			Array{Constructor: codeList32, Elems: []any{[]any{}}},
		},
		{
			Array{Constructor: codeMap8, Elems: []any{Map{}}},
			Array{Constructor: codeMap32, Elems: []any{Map{}}},
		},
		{
			Array{Descriptor: uint64(1), Constructor: codeSmallUint, Elems: []any{Described{uint64(1), uint32(0)}, Described{uint64(1), uint32(7)}}},
			Array{Descriptor: uint64(1), Constructor: codeUint, Elems: []any{Described{uint64(1), uint32(0)}, Described{uint64(1), uint32(7)}}},
		},
		{
			Array{Descriptor: uint64(1), Constructor: codeSmallUlong, Elems: []any{Described{uint64(1), uint64(0)}}},
			Array{Descriptor: uint64(1), Constructor: codeUlong, Elems: []any{Described{uint64(1), uint64(0)}}},
		},
		{
			Array{Descriptor: uint64(1), Constructor: codeSym8, Elems: []any{Described{uint64(1), Symbol("s")}}},
			Array{Descriptor: uint64(1), Constructor: codeSym32, Elems: []any{Described{uint64(1), Symbol("s")}}},
		},
		{
			Array{Constructor: codeFalse, Elems: []any{false}},
			Array{Constructor: codeBool, Elems: []any{false}},
		},
		{
			Array{Constructor: codeArray8, Elems: []any{[]uint32{1}}},
			Array{Constructor: codeArray32, Elems: []any{[]uint32{1}}},
		},
	}
	for _, tc := range tests {
		enc := mustEncode(t, tc.in)
		got, err := decodeOne(enc)
		if err != nil {
			t.Errorf("decode(appendValue(%#v)): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("got %#v\nwant %#v", got, tc.want)
		}
	}
	// Regression: an array8 of list8 holding an empty list decodes, and the
	// decoded value must encode (it did not: list0 does not fit list8).
	v, err := decodeOne(unhex("e0 04 01 c0 01 00"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendValue(nil, v); err != nil {
		t.Fatalf("appendValue(%#v): %v", v, err)
	}
}
