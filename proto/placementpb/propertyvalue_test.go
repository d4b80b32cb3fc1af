package placementpb

import (
	"math"
	"testing"
	"time"
)

func TestPropertyRuleValue(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	cases := []struct {
		in   any
		want string // RuleValue's text form; "" for nil
	}{
		{"x", `string_value:"x"`},
		{true, `bool_value:true`},
		{int8(-3), `long_value:-3`},
		{uint32(7), `long_value:7`},
		{int64(math.MinInt64), `long_value:-9223372036854775808`},
		{uint64(math.MaxInt64), `long_value:9223372036854775807`},
		{uint64(math.MaxUint64), `double_value:1.8446744073709552e+19`},
		{float32(0.5), `double_value:0.5`},
		{at, `timestamp_ms:1700000000123`},
		{[]byte{1}, ""},
		{nil, ""},
		{struct{}{}, ""},
	}
	for _, c := range cases {
		got := PropertyRuleValue(c.in)
		if c.want == "" {
			if got != nil {
				t.Errorf("PropertyRuleValue(%#v) = %v, want nil", c.in, got)
			}
			continue
		}
		if got == nil || compact(got.String()) != c.want {
			t.Errorf("PropertyRuleValue(%#v) = %v, want %s", c.in, got, c.want)
		}
	}
}

// compact drops the spaces prototext may put after a colon.
func compact(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r != ' ' && r != '\u00a0' {
			out = append(out, r)
		}
	}
	return string(out)
}
