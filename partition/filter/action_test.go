package filter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestActions(t *testing.T) {
	ids := func() func() UUID {
		n := byte(0)
		return func() UUID { n++; return UUID{15: n} }
	}
	tests := []struct {
		text  string
		check func(t *testing.T, m *Message)
	}{
		{"SET sys.Label = 'Finance'", func(t *testing.T, m *Message) { eq(t, m.Subject, "Finance") }},
		{"set sys.Subject = 'x'; SET sys.To = 'y'", func(t *testing.T, m *Message) { eq(t, m.Subject, "x"); eq(t, m.To, "y") }},
		{"SET quantity = quantity / 2", func(t *testing.T, m *Message) { eq(t, m.Properties["quantity"], int64(50)) }},
		{"SET a = 1, b = 'two', c = 2.5, d = TRUE", func(t *testing.T, m *Message) {
			eq(t, m.Properties["a"], int64(1))
			eq(t, m.Properties["b"], "two")
			eq(t, m.Properties["c"], 2.5)
			eq(t, m.Properties["d"], true)
		}},
		{"SET a = 1; SET b = a + 1;", func(t *testing.T, m *Message) { eq(t, m.Properties["b"], int64(2)) }},
		{"SET a = 1 SET b = a REMOVE a", func(t *testing.T, m *Message) { eq(t, m.Properties["b"], int64(1)); absent(t, m, "a") }},
		{"SET a = 1, SET b = 2", func(t *testing.T, m *Message) { eq(t, m.Properties["b"], int64(2)) }},
		{"REMOVE color", func(t *testing.T, m *Message) { absent(t, m, "color") }},
		{"REMOVE color, quantity; SET x = 'y'", func(t *testing.T, m *Message) {
			absent(t, m, "color")
			absent(t, m, "quantity")
			eq(t, m.Properties["x"], "y")
		}},
		{"REMOVE missing", func(t *testing.T, m *Message) { absent(t, m, "missing") }},
		{"REMOVE sys.CorrelationId", func(t *testing.T, m *Message) { eq(t, m.CorrelationID, "") }},
		{"SET sys.CorrelationId = NULL", func(t *testing.T, m *Message) { eq(t, m.CorrelationID, "") }},
		{"SET x = NULL", func(t *testing.T, m *Message) {
			if v, ok := m.Properties["x"]; !ok || v != nil {
				t.Errorf("x = %v, %v; want a null that exists", v, ok)
			}
		}},
		{"SET sys.MessageId = newid(), id2 = newid()", func(t *testing.T, m *Message) {
			eq(t, m.MessageID, "00000000-0000-0000-0000-000000000001")
			eq(t, m.Properties["id2"], UUID{15: 2})
		}},
		{"SET sys.TimeToLive = ttl, sys.ScheduledEnqueueTimeUtc = when", func(t *testing.T, m *Message) {
			eq(t, m.TimeToLive, Duration(60_000))
			eq(t, m.ScheduledEnqueueTimeUtc, Timestamp(1_700_000_000_000))
		}},
		{"SET [new name] = color + '!' ; SET user.[AND] = p('color')", func(t *testing.T, m *Message) {
			eq(t, m.Properties["new name"], "red!")
			eq(t, m.Properties["AND"], "red")
		}},
		{"SET sys.SessionId = @color, sys.PartitionKey = @color, sys.ReplyTo = 'r', sys.ReplyToSessionId = 'rs', sys.ContentType = 'c'", func(t *testing.T, m *Message) {
			eq(t, m.SessionID, "red")
			eq(t, m.PartitionKey, "red")
			eq(t, m.ReplyTo, "r")
			eq(t, m.ReplyToSessionID, "rs")
			eq(t, m.ContentType, "c")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			a, err := CompileAction(tt.text, testParams)
			if err != nil {
				t.Fatal(err)
			}
			orig := sample()
			before := sample()
			got, err := a.Apply(orig, ids())
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
			if !reflect.DeepEqual(nanless(orig), nanless(before)) {
				t.Errorf("Apply changed the original message")
			}
			printed := a.String()
			b, err := CompileAction(printed, testParams)
			if err != nil {
				t.Fatalf("printed as %q: %v", printed, err)
			}
			if b.String() != printed {
				t.Errorf("printed as %q, which prints as %q", printed, b.String())
			}
		})
	}
}

// nanless drops the NaN property, which DeepEqual never finds equal.
func nanless(m *Message) *Message {
	delete(m.Properties, "nan")
	return m
}

func eq(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

func absent(t *testing.T, m *Message, name string) {
	t.Helper()
	if v, ok := m.Properties[name]; ok {
		t.Errorf("%s is still there: %v", name, v)
	}
}

func TestActionErrors(t *testing.T) {
	syntax := []struct{ text, msg string }{
		{"", "empty"},
		{"a = 1", "expected SET or REMOVE"},
		{"SET a", "expected '='"},
		{"SET a = ", "expected a value"},
		{"SET a = 1; b = 2", "expected SET or REMOVE"},
		{"SET a = 1 b = 2", "expected ';', ','"},
		{"SET sys.SequenceNumber = 1", "cannot be changed"},
		{"REMOVE sys.EnqueuedTimeUtc", "cannot be changed"},
		{"SET sys.Nope = 1", "no system property"},
		{"SET a = @missing", "no value"},
		{"REMOVE 1", "expected a property name"},
		{"SET a = 1;;", "expected SET or REMOVE"},
	}
	for _, tt := range syntax {
		_, err := CompileAction(tt.text, testParams)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: %v, want a syntax error with %q", tt.text, err, tt.msg)
		}
	}
	eval := []string{
		"SET sys.Label = 5",
		"SET sys.TimeToLive = 5",
		"SET sys.ScheduledEnqueueTimeUtc = 'now'",
		"SET a = 1 / 0",
		"SET a = newid()", // with no source
	}
	for _, text := range eval {
		a, err := CompileAction(text, nil)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		m := sample()
		if got, err := a.Apply(m, nil); !errors.Is(err, ErrEvaluation) || got != nil {
			t.Errorf("%q: %v, %v; want an evaluation error", text, got, err)
		}
	}
}

func TestCorrelation(t *testing.T) {
	m := sample()
	match := []Correlation{
		{CorrelationID: "corr-1"},
		{MessageID: "msg-1", To: "store5", ReplyTo: "replies", Subject: "Important", SessionID: "s1", ContentType: "application/json"},
		{Properties: map[string]any{"color": "red", "quantity": int64(100)}},
		{Properties: map[string]any{"quantity": 100.0, "flag": true}},
		{CorrelationID: "corr-1", Properties: map[string]any{"when": Timestamp(1_700_000_000_000)}},
	}
	nomatch := []Correlation{
		{CorrelationID: "CORR-1"},
		{CorrelationID: "corr-1", To: "elsewhere"},
		{ReplyToSessionID: "x"},
		{Properties: map[string]any{"color": "blue"}},
		{Properties: map[string]any{"missing": "x"}},
		{Properties: map[string]any{"quantity": "100"}},
		{Properties: map[string]any{"nothing": 1}},
	}
	for _, c := range match {
		f, err := c.Compile()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if ok, err := f.Match(m); !ok || err != nil {
			t.Errorf("%+v (%s) did not match: %v", c, f, err)
		}
		// The SQL it prints matches too.
		if sql, err := CompileSQL(f.String(), nil); err != nil {
			t.Errorf("%s: %v", f, err)
		} else if c.Properties["when"] == nil {
			if ok, _ := sql.Match(m); !ok {
				t.Errorf("%s as SQL did not match", f)
			}
		}
	}
	for _, c := range nomatch {
		f, err := c.Compile()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if ok, err := f.Match(m); ok || err != nil {
			t.Errorf("%+v matched: %v", c, err)
		}
	}
	for _, c := range []Correlation{
		{},
		{Properties: map[string]any{}},
		{Properties: map[string]any{"x": nil}},
		{Properties: map[string]any{"x": []int{1}}},
	} {
		if _, err := c.Compile(); !errors.Is(err, ErrSyntax) {
			t.Errorf("%+v: %v, want refused", c, err)
		}
	}
}
