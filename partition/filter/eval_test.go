package filter

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// outcome is a three-valued result, or an evaluation error.
type outcome string

const (
	T   outcome = "true"
	F   outcome = "false"
	U   outcome = "unknown"
	Err outcome = "error"
)

// eval3 compiles text and evaluates it against m, telling unknown apart
// from false, which Match cannot.
func eval3(t *testing.T, text string, m *Message) outcome {
	t.Helper()
	f, err := CompileSQL(text, testParams)
	if err != nil {
		t.Fatalf("CompileSQL(%q): %v", text, err)
	}
	v, err := f.root.eval(env{msg: m})
	if err != nil {
		if !errors.Is(err, ErrEvaluation) {
			t.Fatalf("%q: error %v does not wrap ErrEvaluation", text, err)
		}
		if ok, merr := f.Match(m); ok || merr == nil {
			t.Fatalf("%q: eval failed with %v but Match gave %v, %v", text, err, ok, merr)
		}
		return Err
	}
	ok, merr := f.Match(m)
	if merr != nil {
		if v.kind == kindNull || v.kind == kindBool || !errors.Is(merr, ErrEvaluation) {
			t.Fatalf("%q: Match: %v", text, merr)
		}
		return Err
	}
	switch {
	case v.kind == kindNull:
		if ok {
			t.Fatalf("%q: unknown matched", text)
		}
		return U
	case v.kind == kindBool && v.isTrue():
		if !ok {
			t.Fatalf("%q: true did not match", text)
		}
		return T
	case v.kind == kindBool:
		return F
	}
	t.Fatalf("%q gave %s", text, v.kind)
	return ""
}

// asSyntaxError reports whether err is a *SyntaxError.
func asSyntaxError(err error) (*SyntaxError, bool) {
	var se *SyntaxError
	ok := errors.As(err, &se)
	return se, ok
}

var testParams = map[string]any{"@color": "red", "limit": int32(10), "@pattern": "ab%"}

type (
	symbol   string
	namedInt uint16
)

// sample is the message most tables evaluate against.
func sample() *Message {
	return &Message{
		MessageID:       "msg-1",
		CorrelationID:   "corr-1",
		To:              "store5",
		ReplyTo:         "replies",
		Subject:         "Important",
		SessionID:       "s1",
		ContentType:     "application/json",
		Size:            1024,
		DeliveryCount:   1,
		SequenceNumber:  42,
		EnqueuedTimeUtc: 1_700_000_000_000,
		TimeToLive:      60_000,
		Properties: map[string]any{
			"color":      "red",
			"quantity":   int32(100),
			"big":        uint64(math.MaxUint64),
			"u8":         uint8(7),
			"price":      9.5,
			"f32":        float32(0.5),
			"flag":       true,
			"off":        false,
			"nothing":    nil,
			"empty":      "",
			"with space": "yes",
			"when":       Timestamp(1_700_000_000_000),
			"ttl":        Duration(60_000),
			"id":         UUID{1, 2, 3},
			"bytes":      []byte("abc"),
			"list":       []any{1, 2},
			"AND":        "reserved",
			"neg":        int64(-5),
			"nan":        math.NaN(),
			"a.b":        "dotted",
			"sym":        symbol("s1"),
			"named":      namedInt(4),
		},
	}
}

// Three truth values as conditions: TRUE, FALSE, and a comparison with a
// missing property.
var truth = map[outcome]string{T: "TRUE", F: "FALSE", U: "missing = 1"}

func TestThreeValuedLogic(t *testing.T) {
	and := map[[2]outcome]outcome{
		{T, T}: T, {T, F}: F, {T, U}: U,
		{F, T}: F, {F, F}: F, {F, U}: F,
		{U, T}: U, {U, F}: F, {U, U}: U,
	}
	or := map[[2]outcome]outcome{
		{T, T}: T, {T, F}: T, {T, U}: T,
		{F, T}: T, {F, F}: F, {F, U}: U,
		{U, T}: T, {U, F}: U, {U, U}: U,
	}
	m := sample()
	for pair, want := range and {
		text := "(" + truth[pair[0]] + ") AND (" + truth[pair[1]] + ")"
		if got := eval3(t, text, m); got != want {
			t.Errorf("%s = %s, want %s", text, got, want)
		}
	}
	for pair, want := range or {
		text := "(" + truth[pair[0]] + ") or (" + truth[pair[1]] + ")"
		if got := eval3(t, text, m); got != want {
			t.Errorf("%s = %s, want %s", text, got, want)
		}
	}
	for in, want := range map[outcome]outcome{T: F, F: T, U: U} {
		text := "NOT (" + truth[in] + ")"
		if got := eval3(t, text, m); got != want {
			t.Errorf("%s = %s, want %s", text, got, want)
		}
	}
	// Chains: one FALSE decides an AND whatever else is unknown.
	for text, want := range map[string]outcome{
		"TRUE AND TRUE AND TRUE":         T,
		"TRUE AND missing = 1 AND FALSE": F,
		"TRUE AND missing = 1 AND TRUE":  U,
		"FALSE OR missing = 1 OR TRUE":   T,
		"FALSE OR missing = 1 OR FALSE":  U,
		"FALSE OR FALSE":                 F,
		"NOT NOT TRUE":                   T,
		"a = 1 OR NOT b = 2":             U,
	} {
		if got := eval3(t, text, m); got != want {
			t.Errorf("%s = %s, want %s", text, got, want)
		}
	}
}

func TestOperators(t *testing.T) {
	tests := []struct {
		text string
		want outcome
	}{
		// comparison of numbers, across integer and float types
		{"quantity = 100", T},
		{"quantity = 100.0", T},
		{"quantity = 1E2", T},
		{"quantity <> 100", F},
		{"quantity != 100", F},
		{"quantity > 99", T},
		{"quantity >= 100", T},
		{"quantity < 100", F},
		{"quantity <= 100", T},
		{"price > 9", T},
		{"price < 9.6", T},
		{"f32 = 0.5", T},
		{"u8 = 7", T},
		{"big > 9223372036854775807", T},
		{"neg = -5", T},
		{"neg < -4.5", T},
		{"nan = nan", F},
		{"nan <> 1", T},
		{"nan < 1", F},
		// strings: case-sensitive, ordinal
		{"color = 'red'", T},
		{"color = 'RED'", F},
		{"color <> 'blue'", T},
		{"color < 's'", T},
		{"color >= 'red'", T},
		{"empty = ''", T},
		{"[with space] = 'yes'", T},
		{"\"with space\" = 'yes'", T},
		{"user.[with space] = 'yes'", T},
		{"[AND] = 'reserved'", T},
		{"[a.b] = 'dotted'", T},
		{"'it''s' = 'it''s'", T},
		// booleans
		{"flag = TRUE", T},
		{"flag", T},
		{"off", F},
		{"flag <> off", T},
		{"flag > off", U},
		{"flag AND NOT off", T},
		// incompatible kinds are unknown
		{"color = 1", U},
		{"quantity = '100'", U},
		{"flag = 1", U},
		{"when = 'x'", U},
		{"list = 1", U},
		// other kinds compare with their own
		{"when = sys.EnqueuedTimeUtc", T},
		{"ttl = sys.TimeToLive", T},
		{"when > sys.EnqueuedTimeUtc", F},
		{"id = id", T},
		{"bytes = bytes", T},
		{"id < id", U},
		// null and unknown
		{"missing = 1", U},
		{"nothing = 1", U},
		{"missing <> 1", U},
		{"NULL = NULL", U},
		{"missing IS NULL", T},
		{"nothing IS NULL", T},
		{"color IS NULL", F},
		{"color IS NOT NULL", T},
		{"missing IS NOT NULL", F},
		{"list IS NULL", F},
		{"sys.ReplyToSessionId IS NULL", T},
		{"EXISTS(color)", T},
		{"EXISTS(nothing)", T},
		{"EXISTS(missing)", F},
		{"NOT EXISTS(missing)", T},
		{"EXISTS(sys.To)", T},
		{"EXISTS(sys.ReplyToSessionId)", F},
		// arithmetic
		{"quantity + 1 = 101", T},
		{"quantity - 1 = 99", T},
		{"quantity * 2 = 200", T},
		{"quantity / 3 = 33", T},
		{"quantity % 7 = 2", T},
		{"quantity / 3.0 > 33.3", T},
		{"price * 2 = 19", T},
		{"price % 2 = 1.5", T},
		{"-quantity = -100", T},
		{"+quantity = 100", T},
		{"- -quantity = 100", T},
		{"2 + 3 * 4 = 14", T},
		{"(2 + 3) * 4 = 20", T},
		{"10 - 2 - 3 = 5", T},
		{"7 / 2 = 3", T},
		{"-7 / 2 = -3", T},
		{"-7 % 2 = -1", T},
		{"1 / 0.0 > 1E308", T},
		{"9223372036854775807 + 1 < 0", T},
		{"color + 'x' = 'redx'", T},
		{"missing + 1 = 1", U},
		{"quantity + missing = 1", U},
		{"-missing = 1", U},
		{"1 / 0 = 1", Err},
		{"quantity % 0 = 1", Err},
		{"color * 2 = 1", Err},
		{"color + 1 = 1", Err},
		{"-color = 1", Err},
		{"+flag = 1", Err},
		{"flag + 1 = 1", Err},
		// LIKE
		{"color LIKE 'r%'", T},
		{"color LIKE 'R%'", F},
		{"color LIKE '%e%'", T},
		{"color LIKE 'r_d'", T},
		{"color LIKE 'r_'", F},
		{"color LIKE '___'", T},
		{"color LIKE '%'", T},
		{"empty LIKE '%'", T},
		{"empty LIKE '_'", F},
		{"color NOT LIKE 'b%'", T},
		{"color NOT LIKE 'r%'", F},
		{"missing LIKE '%'", U},
		{"missing NOT LIKE '%'", U},
		{"quantity LIKE '1%'", U},
		{"color LIKE @pattern", F},
		{"'ab%c' LIKE 'ab\\%c' ESCAPE '\\'", T},
		{"'abxc' LIKE 'ab\\%c' ESCAPE '\\'", F},
		{"'ab_c' LIKE 'ab!_c' ESCAPE '!'", T},
		{"'abxc' LIKE 'ab!_c' ESCAPE '!'", F},
		{"'a!b' LIKE 'a!!b' ESCAPE '!'", T},
		{"'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab' LIKE '%a%a%a%a%a%a%a%a%c'", F},
		{"'héllo' LIKE 'h_llo'", T},
		// IN
		{"color IN ('red', 'blue')", T},
		{"color IN ('green', 'blue')", F},
		{"color NOT IN ('green', 'blue')", T},
		{"color NOT IN ('red')", F},
		{"quantity IN (1, 100.0)", T},
		{"color IN ('green', NULL)", U},
		{"color IN ('red', NULL)", T},
		{"color NOT IN ('green', NULL)", U},
		{"missing IN (1, 2)", U},
		{"missing NOT IN (1, 2)", U},
		{"color IN (1, 2)", U},
		{"quantity IN (50 + 50)", T},
		// parameters
		{"color = @color", T},
		{"quantity > @limit", T},
		// system properties, case-insensitive, Label and Subject alike
		{"sys.MessageId = 'msg-1'", T},
		{"SYS.messageid = 'msg-1'", T},
		{"sys.CorrelationId = 'corr-1'", T},
		{"sys.To = 'store5'", T},
		{"sys.ReplyTo = 'replies'", T},
		{"sys.Label = 'Important'", T},
		{"sys.Subject = 'Important'", T},
		{"sys.SessionId = 's1'", T},
		{"sys.ContentType = 'application/json'", T},
		{"sys.Size = 1024", T},
		{"sys.DeliveryCount = 1", T},
		{"sys.SequenceNumber = 42", T},
		{"sys.ScheduledEnqueueTimeUtc IS NULL", T},
		{"sys.LockToken IS NULL", T},
		{"sys.IsBodyConsumed = FALSE", T},
		{"USER.color = 'red'", T},
		{"user.COLOR = 'red'", U},
		// named types read as what they are over
		{"sym = 's1'", T},
		{"sym LIKE 's%'", T},
		{"named = 4.0", T},
		// functions
		{"property('color') = 'red'", T},
		{"p('sys.Label') = 'Important'", T},
		{"p('user.color') = 'red'", T},
		{"p('a.b') = 'dotted'", T},
		{"p('co' + 'lor') = 'red'", T},
		{"p('missing') = 1", U},
		{"p('sys.Nope') = 1", Err},
		{"p(1) = 1", Err},
		// conditions that are not booleans
		{"color AND TRUE", Err},
		{"NOT quantity", Err},
		{"quantity", Err},
	}
	m := sample()
	for _, tt := range tests {
		if got := eval3(t, tt.text, m); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.text, got, tt.want)
		}
	}
}

// TestAzureDocExamples holds the examples of Azure's "SQL filter syntax"
// and "SQL rule action syntax" pages and the subscription-filter samples.
func TestAzureDocExamples(t *testing.T) {
	m := &Message{
		MessageID:     "Msg1",
		CorrelationID: "abc-123",
		Subject:       "Important",
		To:            "Store5",
		Properties: map[string]any{
			"MessageProperty": "A",
			"StoreId":         "Store1",
			"color":           "blue",
			"quantity":        int64(10),
			"StoreName":       "Redmond",
			"MyProperty":      "ABC",
		},
	}
	for text, want := range map[string]outcome{
		"MessageProperty = 'A'":                                        T,
		"user.MessageProperty = 'A'":                                   T,
		"sys.MessageId = 'Msg1'":                                       T,
		"sys.CorrelationId LIKE 'abc-%'":                               T,
		"sys.Label = 'Important'":                                      T,
		"sys.Label = 'Important' AND user.StoreName = 'Redmond'":       T,
		"StoreId IN ('Store1', 'Store2', 'Store3')":                    T,
		"sys.To IN ('Store5','Store6','Store7') OR StoreId = 'Store8'": T,
		"sys.To NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8') OR StoreId NOT IN ('Store1','Store2','Store3','Store4','Store5','Store6','Store7','Store8')": F,
		"color = 'blue' AND quantity = 10":         T,
		"color = 'red'":                            F,
		"quantity > 5 AND color = 'blue'":          T,
		"MessageProperty IS NULL":                  F,
		"MyProperty LIKE 'AB%'":                    T,
		"MyProperty LIKE 'A_C'":                    T,
		"EXISTS(MyProperty) AND NOT EXISTS(Other)": T,
		"1=1": T,
		"1=0": F,
	} {
		if got := eval3(t, text, m); got != want {
			t.Errorf("%s: got %s, want %s", text, got, want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		text string
		pos  int
		msg  string // a fragment of the message
	}{
		{"", 1, "empty"},
		{"   ", 4, "empty"},
		{"color =", 8, "expected a value"},
		{"color = 'red", 9, "unterminated string"},
		{"[color = 1", 1, "unterminated bracketed name"},
		{"\"color = 1", 1, "unterminated quoted name"},
		{"color == 'red'", 8, "expected a value"},
		{"color = 'red' AND", 18, "expected a value"},
		{"(color = 'red'", 15, "expected ')'"},
		{"color = 'red')", 14, "unexpected ')'"},
		{"a = 1 = 2", 7, "unexpected '='"},
		{"color IS 'red'", 10, "expected NULL"},
		{"color NOT = 1", 11, "expected LIKE or IN"},
		{"color LIKE 1", 12, "string constant"},
		{"color LIKE 'a' ESCAPE 'ab'", 23, "single character"},
		{"color LIKE 'a!' ESCAPE '!'", 12, "ends with its escape"},
		{"color IN ()", 11, "expected a value"},
		{"color IN (1 2)", 13, "expected ',' or ')'"},
		{"color IN 1", 10, "expected '('"},
		{"EXISTS(1)", 8, "expected a property"},
		{"EXISTS(color", 13, "expected ')'"},
		{"sys.Nope = 1", 5, "no system property Nope"},
		{"foo.bar = 1", 1, "unknown scope"},
		{"sys. = 1", 6, "expected a property name"},
		{"and = 1", 1, "reserved word"},
		{"color = 99999999999999999999", 9, "out of range"},
		{"x = 1E999", 5, "out of range"},
		{"x = 1E", 7, "exponent"},
		{"x = 1abc", 6, "run into a name"},
		{"x = @nope", 5, "no value"},
		{"x = @", 5, "parameter name"},
		{"x = newid()", 5, "only in actions"},
		{"x = nope(1)", 5, "unknown function"},
		{"x # 1", 3, "unexpected character"},
		{"[] = 1", 1, "empty bracketed name"},
		{"5", 1, "not one"},
		{"'a' + 'b'", 1, "arithmetic"},
		{"a = 1 AND 5", 1, "AND needs conditions"},
		{"NOT 5", 1, "NOT needs conditions"},
		{"é = 'x' AND #", 13, "unexpected character"},
		{"x = \xff", 1, "UTF-8"},
	}
	for _, tt := range tests {
		_, err := CompileSQL(tt.text, testParams)
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: got %v, want a syntax error", tt.text, err)
			continue
		}
		se, ok := asSyntaxError(err)
		if !ok {
			t.Errorf("%q: %v is not a *SyntaxError", tt.text, err)
			continue
		}
		if se.Pos != tt.pos || !strings.Contains(se.Msg, tt.msg) {
			t.Errorf("%q: got %v, want position %d and %q", tt.text, err, tt.pos, tt.msg)
		}
	}
}

func TestLimits(t *testing.T) {
	exact := "c = '" + strings.Repeat("é", MaxTextLength-6) + "'"
	if n := len([]rune(exact)); n != MaxTextLength {
		t.Fatalf("test text has %d characters", n)
	}
	if _, err := CompileSQL(exact, nil); err != nil {
		t.Errorf("a text of exactly %d characters: %v", MaxTextLength, err)
	}
	if _, err := CompileSQL(exact+" ", nil); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "at most 1024") {
		t.Errorf("a text of %d characters: %v", MaxTextLength+1, err)
	}
	if _, err := CompileAction("SET a = '"+strings.Repeat("x", MaxTextLength)+"'", nil); !errors.Is(err, ErrSyntax) {
		t.Errorf("a long action: %v", err)
	}
	for _, deep := range []string{
		strings.Repeat("(", 300) + "1=1" + strings.Repeat(")", 300),
		strings.Repeat("NOT ", 250) + "TRUE",
		"x = " + strings.Repeat("-", 300) + "1",
		"x = 1" + strings.Repeat("+1", 300),
		strings.Repeat("p(", 200) + "'x'" + strings.Repeat(")", 200) + " = 1",
	} {
		_, err := CompileSQL(deep, nil)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "levels deep") {
			t.Errorf("%.30q...: %v, want a nesting error", deep, err)
		}
	}
	// Long flat chains are fine: AND and OR do not nest.
	chain := "a = 1" + strings.Repeat(" OR a = 1", 100)
	if _, err := CompileSQL(chain, nil); err != nil {
		t.Errorf("a chain of 101 ORs: %v", err)
	}
	within := strings.Repeat("(", MaxDepth-1) + "1=1" + strings.Repeat(")", MaxDepth-1)
	if _, err := CompileSQL(within, nil); err != nil {
		t.Errorf("%d parentheses: %v", MaxDepth-1, err)
	}
}

func TestTrueFalseFilters(t *testing.T) {
	m := sample()
	if ok, err := True.Match(m); !ok || err != nil {
		t.Errorf("True: %v, %v", ok, err)
	}
	if ok, err := False.Match(m); ok || err != nil {
		t.Errorf("False: %v, %v", ok, err)
	}
	for f, want := range map[Filter]bool{True: true, False: false} {
		sql, err := CompileSQL(f.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := sql.Match(m); ok != want {
			t.Errorf("%s as SQL: %v", f, ok)
		}
	}
}

func TestPrintRoundTrip(t *testing.T) {
	for _, text := range []string{
		"color = 'red' AND quantity > 5 OR NOT EXISTS(x)",
		"sys.label LIKE 'a!%' ESCAPE '!' AND [we ird]] name] IN (1, 2.5, -3, 'x''y', NULL, TRUE)",
		"-(-1) = - - 1 AND 1E-7 < 1.0 AND 2 * (3 + 4) % 5 = 4",
		"p('x') IS NOT NULL AND color NOT LIKE '%' AND x NOT IN (1)",
		"(a = 1 OR b = 2) OR c = 3",
	} {
		f, err := CompileSQL(text, nil)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		printed := f.String()
		g, err := CompileSQL(printed, nil)
		if err != nil {
			t.Fatalf("%q printed as %q: %v", text, printed, err)
		}
		if g.String() != printed {
			t.Errorf("%q printed as %q, which prints as %q", text, printed, g.String())
		}
	}
}

// TestSDKLiveTestExpressions compiles the rules that the Go SDK's admin
// client tests create against Azure itself (azservicebus v1.11.0,
// admin/admin_client_test.go), with parameters of every type they use.
func TestSDKLiveTestExpressions(t *testing.T) {
	params := map[string]any{
		"@stringVar":   "hello world",
		"@intVar":      int64(100),
		"@floatVar":    float64(100.1),
		"@dateTimeVar": Timestamp(1_700_000_000_000),
		"@boolVar":     true,
	}
	m := &Message{Properties: map[string]any{"MessageID": "hello world", "SomeProperty": "Oslo", "rule1": "hello world"}}
	for text, want := range map[string]outcome{
		"SomeProperty LIKE 'O%'": T,
		"MessageID='hello'":      F,
		"MessageID=@stringVar OR MessageID=@intVar OR MessageID=@floatVar OR MessageID=@dateTimeVar OR MessageID=@boolVar": T,
		"MessageID=rule1": T,
		"MessageID=rule2": U,
		"1=1":             T,
	} {
		f, err := CompileSQL(text, params)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		v, err := f.root.eval(env{msg: m})
		got := F
		switch {
		case err != nil:
			got = Err
		case v.isNull():
			got = U
		case v.isTrue():
			got = T
		}
		if got != want {
			t.Errorf("%q: %s, want %s", text, got, want)
		}
	}
	a, err := CompileAction("SET MessageID=@stringVar SET MessageID=@intVar SET MessageID=@floatVar SET MessageID=@dateTimeVar SET MessageID=@boolVar", params)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Apply(m, nil)
	if err != nil || got.Properties["MessageID"] != true {
		t.Fatalf("action: %v, %v", got.Properties["MessageID"], err)
	}
}
