package filter

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	"color = 'red' AND quantity > 5",
	"sys.Label LIKE 'a!%' ESCAPE '!' OR [x y] IN (1, 2.5E3, 'z', NULL)",
	"NOT EXISTS(user.a) AND -(1 + 2) * 3 % 4 / 5 <> 6",
	"p('sys.To') IS NOT NULL",
	"color = @color",
	"((a = 1))",
	"a NOT LIKE '%_%' AND b NOT IN (TRUE, FALSE)",
	"\"q\"\"n\" = 'it''s'",
	"1=1",
}

// FuzzCompileSQL: no text panics or hangs the compiler or the evaluator;
// a filter that compiles prints as a text that compiles to a filter that
// prints the same and decides the same.
func FuzzCompileSQL(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		flt, err := CompileSQL(text, testParams)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Pos < 1 || se.Pos > utf8.RuneCountInString(text)+1 && utf8.ValidString(text) {
				t.Fatalf("%q: bad error %v", text, err)
			}
			return
		}
		m := sample()
		got, gotErr := flt.Match(m)
		printed := flt.String()
		again, err := parseCondition(printed, testParams, limits{})
		if err != nil {
			t.Fatalf("%q printed as %q, which does not compile: %v", text, printed, err)
		}
		g := &SQL{root: again}
		if g.String() != printed {
			t.Fatalf("%q printed as %q, which prints as %q", text, printed, g.String())
		}
		got2, got2Err := g.Match(m)
		if got != got2 || (gotErr == nil) != (got2Err == nil) {
			t.Fatalf("%q gave %v, %v; printed as %q it gave %v, %v", text, got, gotErr, printed, got2, got2Err)
		}
		if gotErr != nil && !errors.Is(gotErr, ErrEvaluation) {
			t.Fatalf("%q: %v does not wrap ErrEvaluation", text, gotErr)
		}
		// A message with no properties at all.
		if _, err := flt.Match(&Message{}); err != nil && !errors.Is(err, ErrEvaluation) {
			t.Fatalf("%q on an empty message: %v", text, err)
		}
	})
}

// FuzzCompileAction: no action text panics, applying one leaves the
// original message alone, and the printed form compiles back to itself.
func FuzzCompileAction(f *testing.F) {
	for _, s := range []string{
		"SET a = 1; SET b = 'x'",
		"SET a = 1, b = a + 2",
		"REMOVE a, sys.To",
		"SET sys.MessageId = newid(); REMOVE color;",
		"SET sys.Label = @color",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		a, err := CompileAction(text, testParams)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("%q: %v", text, err)
			}
			return
		}
		m := sample()
		_, err = a.Apply(m, func() UUID { return UUID{1} })
		if err != nil && !errors.Is(err, ErrEvaluation) {
			t.Fatalf("%q: %v", text, err)
		}
		if m.Properties["color"] != "red" || m.MessageID != "msg-1" {
			t.Fatalf("%q changed the original message", text)
		}
		printed := a.String()
		b, err := compileAction(printed, testParams, limits{})
		if err != nil {
			t.Fatalf("%q printed as %q, which does not compile: %v", text, printed, err)
		}
		if b.String() != printed {
			t.Fatalf("%q printed as %q, which prints as %q", text, printed, b.String())
		}
	})
}

// FuzzLike checks the LIKE matcher against a regular expression built from
// the same pattern.
func FuzzLike(f *testing.F) {
	f.Add("a%b_c", "aXXbYc", "")
	f.Add("%%a!%", "xxa%", "!")
	f.Add("___", "héé", "")
	f.Fuzz(func(t *testing.T, pattern, s, escape string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(s) || utf8.RuneCountInString(escape) > 1 || !utf8.ValidString(escape) {
			return
		}
		esc, _ := utf8.DecodeRuneInString(escape)
		p, msg := compileLike(pattern, esc, escape != "")
		if msg != "" {
			return
		}
		var re strings.Builder
		re.WriteString(`(?s)\A`)
		escaped := false
		for _, r := range pattern {
			switch {
			case escaped:
				re.WriteString(regexp.QuoteMeta(string(r)))
				escaped = false
			case escape != "" && r == esc:
				escaped = true
			case r == '%':
				re.WriteString(".*")
			case r == '_':
				re.WriteString(".")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		re.WriteString(`\z`)
		want := regexp.MustCompile(re.String()).MatchString(s)
		if got := p.match(s); got != want {
			t.Fatalf("%q LIKE %q ESCAPE %q: got %v, regexp %s says %v", s, pattern, escape, got, re.String(), want)
		}
	})
}
