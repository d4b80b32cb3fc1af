package frontend

import (
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
)

// TestIncomingApplicationProperties: application-properties hold string
// keys and simple values only (AMQP 3.2.5, as Service Bus enforces);
// anything else is refused before it is stored, as is a section nested
// past the engine's bound.
func TestIncomingApplicationProperties(t *testing.T) {
	deep := any(int64(1))
	for range 7000 {
		deep = []any{deep}
	}
	for _, tc := range []struct {
		name  string
		props amqp.Map
		want  string // "" accepts; else in the error
	}{
		{"simple values", amqp.Map{
			{Key: "s", Value: "x"}, {Key: "i", Value: int64(1)}, {Key: "b", Value: true}, {Key: "n", Value: nil},
			{Key: "t", Value: time.UnixMilli(5)}, {Key: "u", Value: amqp.UUID{1}}, {Key: "bin", Value: []byte{1}},
			{Key: "d", Value: 1.5}, {Key: "sym", Value: amqp.Symbol("y")}, {Key: "c", Value: amqp.Char('c')},
		}, ""},
		{"a described simple value (.NET's DateTimeOffset)", amqp.Map{{Key: "dto", Value: amqp.Described{Descriptor: amqp.Symbol("com.microsoft:datetime-offset"), Value: int64(1)}}}, ""},
		{"a list", amqp.Map{{Key: "l", Value: []any{int64(1)}}}, `"l": amqp: decode error: a list is not of a simple type`},
		{"a map", amqp.Map{{Key: "m", Value: amqp.Map{{Key: "a", Value: "b"}}}}, "not of a simple type"},
		{"an array", amqp.Map{{Key: "a", Value: []int64{1, 2}}}, "not of a simple type"},
		{"a described list", amqp.Map{{Key: "dl", Value: amqp.Described{Descriptor: uint64(7), Value: []any{"x"}}}}, "not of a simple type"},
		{"a key that is not a string", amqp.Map{{Key: int64(3), Value: "x"}}, "keys must be strings"},
		{"7000 nested lists", amqp.Map{{Key: "deep", Value: deep}}, "nested deeper than"},
	} {
		enc, err := (&amqp.Message{ApplicationProperties: tc.props, Data: [][]byte{[]byte("body")}}).Append(nil)
		if err != nil {
			t.Fatalf("%s: encoding: %v", tc.name, err)
		}
		nm, err := incoming(enc)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want == "" && len(nm.Bare) == 0:
			t.Errorf("%s: no bare message stored", tc.name)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestIncomingDeepBody: an amqp-value body nested past the engine's bound
// is refused; one within it is stored.
func TestIncomingDeepBody(t *testing.T) {
	for depth, ok := range map[int]bool{7000: false, 30: true} {
		v := any("leaf")
		for range depth {
			v = []any{v}
		}
		enc, err := (&amqp.Message{Value: v, HasValue: true}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = incoming(enc)
		if ok != (err == nil) {
			t.Errorf("amqp-value of %d nested lists: %v", depth, err)
		}
	}
}
