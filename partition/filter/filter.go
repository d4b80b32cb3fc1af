package filter

import "strings"

// Filter decides whether a subscription takes a copy of a message.
type Filter interface {
	// Match reports whether the message matches. An error wraps
	// ErrEvaluation; the message then matches nothing.
	Match(m *Message) (bool, error)
	// String is the filter in a canonical form that compiles back to the
	// same filter.
	String() string
}

// SQL is a compiled SQL filter expression.
type SQL struct {
	text string
	root node
}

// CompileSQL compiles a SqlFilter expression. params binds the filter's
// @parameters (keys with or without the @). An error wraps ErrSyntax and
// is a *SyntaxError naming the position.
func CompileSQL(text string, params map[string]any) (*SQL, error) {
	root, err := parseCondition(text, params, azureLimits)
	if err != nil {
		return nil, err
	}
	return &SQL{text: text, root: root}, nil
}

// Match evaluates the filter: a match only when it is true, not when it is
// false or unknown.
func (f *SQL) Match(m *Message) (bool, error) {
	e := env{msg: m}
	v, err := f.root.eval(e)
	if err != nil {
		return false, err
	}
	switch v.kind {
	case kindNull, kindBool:
		return v.isTrue(), nil
	}
	return false, evalErrorf("the filter gave %s, not a condition", v.kind)
}

// Text is the expression as it was written.
func (f *SQL) Text() string { return f.text }

func (f *SQL) String() string {
	var b strings.Builder
	f.root.print(&b)
	return b.String()
}

type constFilter bool

func (c constFilter) Match(*Message) (bool, error) { return bool(c), nil }
func (c constFilter) String() string {
	if c {
		return "1=1"
	}
	return "1=0"
}

// True matches every message (Azure's TrueFilter, the $Default rule's);
// False matches none (FalseFilter).
var (
	True  Filter = constFilter(true)
	False Filter = constFilter(false)
)
