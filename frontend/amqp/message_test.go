package amqp

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func appProps(t testing.TB, m Map) []byte {
	t.Helper()
	b, err := (&Message{ApplicationProperties: m}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckApplicationProperties: string keys and simple values pass, as
// does a described simple value; lists, maps, arrays, described compounds,
// other keys and malformed simple values do not.
func TestCheckApplicationProperties(t *testing.T) {
	ok := Map{
		{Key: "s", Value: "x"}, {Key: "i", Value: int64(-1)}, {Key: "u", Value: uint64(1 << 40)}, {Key: "b", Value: true},
		{Key: "n", Value: nil}, {Key: "t", Value: time.UnixMilli(5)}, {Key: "id", Value: UUID{1}}, {Key: "bin", Value: []byte{1}},
		{Key: "f", Value: float32(1.5)}, {Key: "d", Value: 2.5}, {Key: "sym", Value: Symbol("y")}, {Key: "c", Value: Char('c')},
		{Key: "i8", Value: int8(-3)}, {Key: "u16", Value: uint16(9)}, {Key: "dec", Value: Decimal64{1}},
		{Key: "dto", Value: Described{Descriptor: Symbol("com.microsoft:datetime-offset"), Value: int64(1)}},
		{Key: "num", Value: Described{Descriptor: uint64(0x137000000000001), Value: "x"}},
	}
	if err := CheckApplicationProperties(appProps(t, ok)); err != nil {
		t.Errorf("simple values: %v", err)
	}
	if err := CheckApplicationProperties(append(appendDescriptor(nil, SectionApplicationProperties), codeNull)); err != nil {
		t.Errorf("null: %v", err)
	}
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"a list", appProps(t, Map{{Key: "l", Value: []any{int64(1)}}}), `"l"`},
		{"an empty list", appProps(t, Map{{Key: "l0", Value: []any{}}}), "not of a simple type"},
		{"a map", appProps(t, Map{{Key: "m", Value: Map{{Key: "a", Value: "b"}}}}), "not of a simple type"},
		{"an array", appProps(t, Map{{Key: "a", Value: []int64{1}}}), "not of a simple type"},
		{"a described list", appProps(t, Map{{Key: "dl", Value: Described{Descriptor: uint64(7), Value: []any{"x"}}}}), "not of a simple type"},
		{"a described described", appProps(t, Map{{Key: "dd", Value: Described{Descriptor: uint64(7), Value: Described{Descriptor: uint64(8), Value: "x"}}}}), "not of a simple type"},
		{"a key that is not a string", appProps(t, Map{{Key: Symbol("k"), Value: "x"}}), "keys must be strings"},
		{"a list instead of a map", append(appendDescriptor(nil, SectionApplicationProperties), codeList0), "not a map"},
		{"another section", appendBinary(appendDescriptor(nil, SectionData), []byte("x")), "expected application-properties"},
		{"a string that is not UTF-8", append(appendDescriptor(nil, SectionApplicationProperties), codeMap8, 7, 2, codeStr8, 1, 'k', codeStr8, 1, 0xff), "UTF-8"},
		{"a boolean byte of 2", append(appendDescriptor(nil, SectionApplicationProperties), codeMap8, 6, 2, codeStr8, 1, 'k', codeBool, 2), "boolean byte"},
		{"a uint descriptor", append(appendDescriptor(nil, SectionApplicationProperties), codeMap8, 8, 2, codeStr8, 1, 'k', codeDescribed, codeSmallUint, 1, codeNull), "descriptor"},
		{"bytes after the map", append(appProps(t, Map{{Key: "k", Value: "v"}}), codeNull), "after the value"},
		{"a truncated map", appProps(t, Map{{Key: "k", Value: "v"}})[:8], "decode error"},
	} {
		err := CheckApplicationProperties(tc.raw)
		if !errors.Is(err, errDecode) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a decode error saying %q", tc.name, err, tc.want)
		}
	}
}
