package filter

import (
	"math"
	"strings"
)

// env is what an evaluation reads besides the tree.
type env struct {
	msg   *Message
	newID func() UUID // nil in filters
}

// node is a compiled expression. Conditions evaluate to a boolean or null
// (unknown); other expressions to any value.
type node interface {
	eval(e env) (value, error)
	// print writes the node so that the parser reads it back as the same
	// tree: operators fully parenthesized, names bracketed.
	print(b *strings.Builder)
	// height is the number of nodes on the longest path to a leaf.
	height() int
}

type litNode struct{ v value }

func (n *litNode) eval(env) (value, error) { return n.v, nil }
func (n *litNode) print(b *strings.Builder) {
	if n.v.kind == kindInt && n.v.i < 0 || n.v.kind == kindFloat && (n.v.f < 0 || math.Signbit(n.v.f)) {
		b.WriteString("(" + n.v.literal() + ")")
		return
	}
	b.WriteString(n.v.literal())
}
func (n *litNode) height() int { return 1 }

// paramNode is a filter parameter (@name), bound when the filter compiles.
type paramNode struct {
	name string // with its @
	v    value
}

func (n *paramNode) eval(env) (value, error)  { return n.v, nil }
func (n *paramNode) print(b *strings.Builder) { b.WriteString(n.name) }
func (n *paramNode) height() int              { return 1 }

type sysNode struct{ p sysProp }

func (n *sysNode) eval(e env) (value, error) { return sysValue(e.msg, n.p), nil }
func (n *sysNode) print(b *strings.Builder) {
	b.WriteString("sys.")
	b.WriteString(bracket(sysProps[n.p].name))
}
func (n *sysNode) height() int { return 1 }

type userNode struct{ name string }

func (n *userNode) eval(e env) (value, error) {
	v, ok := e.msg.Properties[n.name]
	if !ok {
		return value{}, nil
	}
	return fromAny(v), nil
}
func (n *userNode) print(b *strings.Builder) {
	b.WriteString("user.")
	b.WriteString(bracket(n.name))
}
func (n *userNode) height() int { return 1 }

func bracket(name string) string {
	return "[" + strings.ReplaceAll(name, "]", "]]") + "]"
}

// negNode is unary minus (neg true) or plus.
type negNode struct {
	neg bool
	x   node
	h   int
}

func (n *negNode) eval(e env) (value, error) {
	v, err := n.x.eval(e)
	if err != nil || v.isNull() {
		return value{}, err
	}
	switch {
	case v.kind == kindInt && n.neg:
		return intValue(-v.i), nil
	case v.kind == kindFloat && n.neg:
		return floatValue(-v.f), nil
	case v.isNumber():
		return v, nil
	}
	if n.neg {
		return value{}, evalErrorf("cannot negate %s", v.kind)
	}
	return value{}, evalErrorf("unary + needs a number, not %s", v.kind)
}
func (n *negNode) print(b *strings.Builder) {
	if n.neg {
		b.WriteString("(-")
	} else {
		b.WriteString("(+")
	}
	n.x.print(b)
	b.WriteByte(')')
}
func (n *negNode) height() int { return n.h }

// arithNode is + - * / %.
type arithNode struct {
	op   byte
	l, r node
	h    int
}

func (n *arithNode) eval(e env) (value, error) {
	l, err := n.l.eval(e)
	if err != nil {
		return value{}, err
	}
	r, err := n.r.eval(e)
	if err != nil {
		return value{}, err
	}
	if l.isNull() || r.isNull() {
		return value{}, nil
	}
	return arith(n.op, l, r)
}

func arith(op byte, l, r value) (value, error) {
	if op == '+' && l.kind == kindString && r.kind == kindString {
		return stringValue(l.s + r.s), nil
	}
	if !l.isNumber() || !r.isNumber() {
		return value{}, evalErrorf("cannot apply %c to %s and %s", op, l.kind, r.kind)
	}
	if l.kind == kindInt && r.kind == kindInt {
		x, y := l.i, r.i
		switch op {
		case '+':
			return intValue(x + y), nil
		case '-':
			return intValue(x - y), nil
		case '*':
			return intValue(x * y), nil
		}
		if y == 0 {
			return value{}, evalErrorf("integer division by zero")
		}
		if op == '/' {
			return intValue(x / y), nil
		}
		return intValue(x % y), nil
	}
	x, y := l.float(), r.float()
	switch op {
	case '+':
		return floatValue(x + y), nil
	case '-':
		return floatValue(x - y), nil
	case '*':
		return floatValue(x * y), nil
	case '/':
		return floatValue(x / y), nil
	}
	return floatValue(math.Mod(x, y)), nil
}

func (n *arithNode) print(b *strings.Builder) {
	b.WriteByte('(')
	n.l.print(b)
	b.WriteString(" " + string(n.op) + " ")
	n.r.print(b)
	b.WriteByte(')')
}
func (n *arithNode) height() int { return n.h }

// cmpNode is = <> != < <= > >=. ne keeps how <> was written.
type cmpNode struct {
	op   string
	l, r node
	h    int
}

func (n *cmpNode) eval(e env) (value, error) {
	l, err := n.l.eval(e)
	if err != nil {
		return value{}, err
	}
	r, err := n.r.eval(e)
	if err != nil {
		return value{}, err
	}
	if l.isNull() || r.isNull() {
		return value{}, nil
	}
	c, ordered, ok := compare(l, r)
	if !ok {
		return value{}, nil
	}
	switch n.op {
	case "=":
		return boolValue(c == 0), nil
	case "<>", "!=":
		return boolValue(c != 0), nil
	}
	if !ordered {
		return value{}, nil
	}
	switch n.op {
	case "<":
		return boolValue(c == -1), nil
	case "<=":
		return boolValue(c == -1 || c == 0), nil
	case ">":
		return boolValue(c == 1), nil
	}
	return boolValue(c == 1 || c == 0), nil // ">="
}
func (n *cmpNode) print(b *strings.Builder) {
	b.WriteByte('(')
	n.l.print(b)
	b.WriteString(" " + n.op + " ")
	n.r.print(b)
	b.WriteByte(')')
}
func (n *cmpNode) height() int { return n.h }

// logicNode is a chain of AND (and true) or OR operands.
type logicNode struct {
	and bool
	xs  []node
	h   int
}

func (n *logicNode) eval(e env) (value, error) {
	unknown := false
	for _, x := range n.xs {
		v, err := x.eval(e)
		if err != nil {
			return value{}, err
		}
		switch v.kind {
		case kindNull:
			unknown = true
		case kindBool:
			// false decides an AND, true an OR.
			if v.isTrue() != n.and {
				return v, nil
			}
		default:
			return value{}, evalErrorf("%s needs conditions, not %s", n.opName(), v.kind)
		}
	}
	if unknown {
		return value{}, nil
	}
	return boolValue(n.and), nil
}
func (n *logicNode) opName() string {
	if n.and {
		return "AND"
	}
	return "OR"
}
func (n *logicNode) print(b *strings.Builder) {
	b.WriteByte('(')
	for i, x := range n.xs {
		if i > 0 {
			b.WriteString(" " + n.opName() + " ")
		}
		x.print(b)
	}
	b.WriteByte(')')
}
func (n *logicNode) height() int { return n.h }

type notNode struct {
	x node
	h int
}

func (n *notNode) eval(e env) (value, error) {
	v, err := n.x.eval(e)
	if err != nil {
		return value{}, err
	}
	switch v.kind {
	case kindNull:
		return v, nil
	case kindBool:
		return boolValue(!v.isTrue()), nil
	}
	return value{}, evalErrorf("NOT needs a condition, not %s", v.kind)
}
func (n *notNode) print(b *strings.Builder) {
	b.WriteString("(NOT ")
	n.x.print(b)
	b.WriteByte(')')
}
func (n *notNode) height() int { return n.h }

type isNullNode struct {
	x   node
	not bool
	h   int
}

func (n *isNullNode) eval(e env) (value, error) {
	v, err := n.x.eval(e)
	if err != nil {
		return value{}, err
	}
	return boolValue(v.isNull() != n.not), nil
}
func (n *isNullNode) print(b *strings.Builder) {
	b.WriteByte('(')
	n.x.print(b)
	if n.not {
		b.WriteString(" IS NOT NULL)")
	} else {
		b.WriteString(" IS NULL)")
	}
}
func (n *isNullNode) height() int { return n.h }

type likeNode struct {
	x        node
	not      bool
	pattern  string
	escape   string // "" when there is no ESCAPE clause
	compiled likePattern
	h        int
}

func (n *likeNode) eval(e env) (value, error) {
	v, err := n.x.eval(e)
	if err != nil || v.kind != kindString {
		return value{}, err // null, or not a string: unknown
	}
	return boolValue(n.compiled.match(v.s) != n.not), nil
}
func (n *likeNode) print(b *strings.Builder) {
	b.WriteByte('(')
	n.x.print(b)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" LIKE " + quoteString(n.pattern))
	if n.escape != "" {
		b.WriteString(" ESCAPE " + quoteString(n.escape))
	}
	b.WriteByte(')')
}
func (n *likeNode) height() int { return n.h }

type inNode struct {
	x    node
	not  bool
	list []node
	h    int
}

func (n *inNode) eval(e env) (value, error) {
	v, err := n.x.eval(e)
	if err != nil || v.isNull() {
		return value{}, err
	}
	unknown := false
	for _, item := range n.list {
		w, err := item.eval(e)
		if err != nil {
			return value{}, err
		}
		eq := equal(v, w)
		if eq.isTrue() {
			return boolValue(!n.not), nil
		}
		if eq.isNull() {
			unknown = true
		}
	}
	if unknown {
		return value{}, nil
	}
	return boolValue(n.not), nil
}
func (n *inNode) print(b *strings.Builder) {
	b.WriteByte('(')
	n.x.print(b)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" IN (")
	for i, item := range n.list {
		if i > 0 {
			b.WriteString(", ")
		}
		item.print(b)
	}
	b.WriteString("))")
}
func (n *inNode) height() int { return n.h }

type existsNode struct {
	ref node // *sysNode or *userNode
}

func (n *existsNode) eval(e env) (value, error) {
	switch r := n.ref.(type) {
	case *userNode:
		_, ok := e.msg.Properties[r.name]
		return boolValue(ok), nil
	case *sysNode:
		return boolValue(!sysValue(e.msg, r.p).isNull()), nil
	}
	return value{}, nil
}
func (n *existsNode) print(b *strings.Builder) {
	b.WriteString("EXISTS(")
	n.ref.print(b)
	b.WriteByte(')')
}
func (n *existsNode) height() int { return 2 }

type newIDNode struct{}

func (newIDNode) eval(e env) (value, error) {
	if e.newID == nil {
		return value{}, evalErrorf("newid() has no source of identifiers here")
	}
	return value{kind: kindUUID, x: e.newID()}, nil
}
func (newIDNode) print(b *strings.Builder) { b.WriteString("newid()") }
func (newIDNode) height() int              { return 1 }

// propertyNode is property(name) or p(name): the property named by a
// string computed at run time, "[sys.|user.]name".
type propertyNode struct {
	fn   string // as the printer writes it
	name node
	h    int
}

func (n *propertyNode) eval(e env) (value, error) {
	v, err := n.name.eval(e)
	if err != nil || v.isNull() {
		return value{}, err
	}
	if v.kind != kindString {
		return value{}, evalErrorf("%s() needs a property name, not %s", n.fn, v.kind)
	}
	scope, name, found := strings.Cut(v.s, ".")
	if !found {
		scope, name = "user", v.s
	}
	switch strings.ToLower(scope) {
	case "sys":
		p, ok := lookupSys(name)
		if !ok {
			return value{}, evalErrorf("%s(): there is no system property %q", n.fn, name)
		}
		return sysValue(e.msg, p), nil
	case "user":
		x, ok := e.msg.Properties[name]
		if !ok {
			return value{}, nil
		}
		return fromAny(x), nil
	}
	// A user property whose own name holds a dot.
	x, ok := e.msg.Properties[v.s]
	if !ok {
		return value{}, nil
	}
	return fromAny(x), nil
}
func (n *propertyNode) print(b *strings.Builder) {
	b.WriteString(n.fn + "(")
	n.name.print(b)
	b.WriteByte(')')
}
func (n *propertyNode) height() int { return n.h }

func maxHeight(ns ...node) int {
	h := 0
	for _, n := range ns {
		h = max(h, n.height())
	}
	return h + 1
}
