package filter

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// MaxTextLength is the longest filter or action text, in characters,
	// that Azure accepts (SqlFilter and SqlRuleAction expressions).
	MaxTextLength = 1024
	// MaxDepth bounds how deeply expressions nest: parentheses, NOT and
	// unary signs, and the height of chains of arithmetic, so that neither
	// the recursive parser nor the evaluator can run out of stack.
	MaxDepth = 128
)

// limits are what a parse enforces; tests reparse printed trees, whose
// parentheses nest deeper than the text they came from, without them.
type limits struct {
	length int // characters; 0: none
	depth  int
}

var azureLimits = limits{length: MaxTextLength, depth: MaxDepth}

type parser struct {
	toks     []token
	i        int
	params   map[string]any
	allowNew bool // newid() is allowed (actions only)
	lim      limits
	depth    int
}

func newParser(text string, params map[string]any, lim limits) (*parser, error) {
	if !utf8.ValidString(text) {
		return nil, &SyntaxError{Pos: 1, Msg: "the text is not valid UTF-8"}
	}
	if n := utf8.RuneCountInString(text); lim.length > 0 && n > lim.length {
		return nil, &SyntaxError{Pos: lim.length + 1, Msg: "the text is " + strconv.Itoa(n) + " characters long; at most " + strconv.Itoa(lim.length) + " are allowed"}
	}
	toks, err := lex(text)
	if err != nil {
		return nil, err
	}
	return &parser{toks: toks, params: params, lim: lim}, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) errAt(t token, msg string) error {
	return &SyntaxError{Pos: t.pos, Msg: msg}
}

// isKeyword reports whether t is the keyword kw (lowercase).
func isKeyword(t token, kw string) bool {
	return t.kind == tokIdent && strings.EqualFold(t.text, kw)
}

func isOp(t token, op string) bool { return t.kind == tokOp && t.text == op }

func describe(t token) string {
	switch t.kind {
	case tokEOF:
		return "the end of the text"
	case tokString:
		return "the string " + quoteString(t.text)
	case tokQuotedIdent:
		return "the name " + bracket(t.text)
	}
	return "'" + t.text + "'"
}

func (p *parser) expectOp(op string) (token, error) {
	t := p.next()
	if !isOp(t, op) {
		return t, p.errAt(t, "expected '"+op+"' but found "+describe(t))
	}
	return t, nil
}

// enter counts one more level of nesting at t.
func (p *parser) enter(t token) error {
	p.depth++
	if p.lim.depth > 0 && p.depth > p.lim.depth {
		return p.errAt(t, "the expression nests more than "+strconv.Itoa(p.lim.depth)+" levels deep")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// checkHeight refuses a node whose tree is too tall.
func (p *parser) checkHeight(n node, at token) (node, error) {
	if p.lim.depth > 0 && n.height() > p.lim.depth {
		return nil, p.errAt(at, "the expression nests more than "+strconv.Itoa(p.lim.depth)+" levels deep")
	}
	return n, nil
}

func (p *parser) parseExpr() (node, error) {
	if err := p.enter(p.peek()); err != nil {
		return nil, err
	}
	defer p.leave()
	return p.parseLogic(false)
}

// parseLogic parses a chain of OR (and false) or AND (and true) operands.
func (p *parser) parseLogic(and bool) (node, error) {
	start := p.peek()
	operand := func() (node, error) {
		if and {
			return p.parseNot()
		}
		return p.parseLogic(true)
	}
	kw := "or"
	if and {
		kw = "and"
	}
	x, err := operand()
	if err != nil {
		return nil, err
	}
	if !isKeyword(p.peek(), kw) {
		return x, nil
	}
	xs := []node{x}
	for isKeyword(p.peek(), kw) {
		p.next()
		y, err := operand()
		if err != nil {
			return nil, err
		}
		xs = append(xs, y)
	}
	for _, x := range xs {
		if err := p.checkCondition(x, start, strings.ToUpper(kw)); err != nil {
			return nil, err
		}
	}
	return p.checkHeight(&logicNode{and: and, xs: xs, h: maxHeight(xs...)}, start)
}

// checkCondition refuses an operand that can never be a condition (a
// constant or arithmetic), so that "a AND 5" fails when the rule is
// created rather than on every message.
func (p *parser) checkCondition(n node, at token, where string) error {
	switch n := n.(type) {
	case *arithNode, *negNode:
		return p.errAt(at, where+" needs conditions, and arithmetic is not one")
	case *litNode:
		if n.v.kind != kindBool && n.v.kind != kindNull {
			return p.errAt(at, where+" needs conditions, and "+n.v.literal()+" is not one")
		}
	}
	return nil
}

func (p *parser) parseNot() (node, error) {
	t := p.peek()
	if !isKeyword(t, "not") {
		return p.parsePredicate()
	}
	p.next()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	if err := p.checkCondition(x, t, "NOT"); err != nil {
		return nil, err
	}
	return p.checkHeight(&notNode{x: x, h: maxHeight(x)}, t)
}

var cmpOps = map[string]bool{"=": true, "<>": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (p *parser) parsePredicate() (node, error) {
	start := p.peek()
	x, err := p.parseAdditive()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	switch {
	case t.kind == tokOp && cmpOps[t.text]:
		p.next()
		y, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		return p.checkHeight(&cmpNode{op: t.text, l: x, r: y, h: maxHeight(x, y)}, start)
	case isKeyword(t, "is"):
		p.next()
		not := false
		if isKeyword(p.peek(), "not") {
			p.next()
			not = true
		}
		if n := p.next(); !isKeyword(n, "null") {
			return nil, p.errAt(n, "expected NULL after IS but found "+describe(n))
		}
		return p.checkHeight(&isNullNode{x: x, not: not, h: maxHeight(x)}, start)
	}
	not := false
	if isKeyword(t, "not") {
		n := p.toks[p.i+1]
		if !isKeyword(n, "like") && !isKeyword(n, "in") {
			return nil, p.errAt(n, "expected LIKE or IN after NOT but found "+describe(n))
		}
		p.next()
		not = true
		t = p.peek()
	}
	switch {
	case isKeyword(t, "like"):
		p.next()
		return p.parseLike(x, not, start)
	case isKeyword(t, "in"):
		p.next()
		return p.parseIn(x, not, start)
	}
	return x, nil
}

// parseLike reads the pattern and escape of LIKE: string constants (or
// parameters holding strings), so that the pattern compiles once.
func (p *parser) parseLike(x node, not bool, start token) (node, error) {
	pt := p.peek()
	pattern, err := p.parseStringConstant("the LIKE pattern")
	if err != nil {
		return nil, err
	}
	n := &likeNode{x: x, not: not, pattern: pattern, h: maxHeight(x)}
	var esc rune
	if isKeyword(p.peek(), "escape") {
		p.next()
		et := p.peek()
		s, err := p.parseStringConstant("the ESCAPE character")
		if err != nil {
			return nil, err
		}
		if utf8.RuneCountInString(s) != 1 {
			return nil, p.errAt(et, "the ESCAPE character must be a single character, not "+quoteString(s))
		}
		esc, _ = utf8.DecodeRuneInString(s)
		n.escape = s
	}
	compiled, msg := compileLike(pattern, esc, n.escape != "")
	if msg != "" {
		return nil, p.errAt(pt, msg)
	}
	n.compiled = compiled
	return p.checkHeight(n, start)
}

func (p *parser) parseStringConstant(what string) (string, error) {
	t := p.next()
	switch t.kind {
	case tokString:
		return t.text, nil
	case tokParam:
		v, err := p.param(t)
		if err != nil {
			return "", err
		}
		if v.kind == kindString {
			return v.s, nil
		}
	}
	return "", p.errAt(t, what+" must be a string constant, not "+describe(t))
}

func (p *parser) parseIn(x node, not bool, start token) (node, error) {
	open, err := p.expectOp("(")
	if err != nil {
		return nil, err
	}
	if err := p.enter(open); err != nil {
		return nil, err
	}
	defer p.leave()
	var list []node
	for {
		item, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		list = append(list, item)
		t := p.next()
		if isOp(t, ")") {
			break
		}
		if !isOp(t, ",") {
			return nil, p.errAt(t, "expected ',' or ')' in the IN list but found "+describe(t))
		}
	}
	return p.checkHeight(&inNode{x: x, not: not, list: list, h: maxHeight(append([]node{x}, list...)...)}, start)
}

func (p *parser) parseAdditive() (node, error) {
	start := p.peek()
	x, err := p.parseMultiplicative()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); isOp(t, "+") || isOp(t, "-"); t = p.peek() {
		p.next()
		y, err := p.parseMultiplicative()
		if err != nil {
			return nil, err
		}
		if x, err = p.checkHeight(&arithNode{op: t.text[0], l: x, r: y, h: maxHeight(x, y)}, start); err != nil {
			return nil, err
		}
	}
	return x, nil
}

func (p *parser) parseMultiplicative() (node, error) {
	start := p.peek()
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for t := p.peek(); isOp(t, "*") || isOp(t, "/") || isOp(t, "%"); t = p.peek() {
		p.next()
		y, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		if x, err = p.checkHeight(&arithNode{op: t.text[0], l: x, r: y, h: maxHeight(x, y)}, start); err != nil {
			return nil, err
		}
	}
	return x, nil
}

func (p *parser) parseUnary() (node, error) {
	t := p.peek()
	if !isOp(t, "-") && !isOp(t, "+") {
		return p.parsePrimary()
	}
	p.next()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	return p.checkHeight(&negNode{neg: t.text == "-", x: x, h: maxHeight(x)}, t)
}

func (p *parser) parsePrimary() (node, error) {
	t := p.next()
	switch t.kind {
	case tokInt:
		i, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return nil, p.errAt(t, "the integer "+t.text+" is out of range")
		}
		return &litNode{v: intValue(i)}, nil
	case tokFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, p.errAt(t, "the number "+t.text+" is out of range")
		}
		return &litNode{v: floatValue(f)}, nil
	case tokString:
		return &litNode{v: stringValue(t.text)}, nil
	case tokParam:
		v, err := p.param(t)
		if err != nil {
			return nil, err
		}
		return &paramNode{name: t.text, v: v}, nil
	case tokOp:
		if t.text == "(" {
			x, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if _, err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return x, nil
		}
	case tokIdent:
		switch strings.ToLower(t.text) {
		case "true":
			return &litNode{v: boolValue(true)}, nil
		case "false":
			return &litNode{v: boolValue(false)}, nil
		case "null":
			return &litNode{v: value{}}, nil
		case "exists":
			if _, err := p.expectOp("("); err != nil {
				return nil, err
			}
			ref, err := p.parseProperty(p.next())
			if err != nil {
				return nil, err
			}
			if _, err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return &existsNode{ref: ref}, nil
		}
		if isOp(p.peek(), "(") {
			return p.parseFunction(t)
		}
		return p.parseProperty(t)
	case tokQuotedIdent:
		return p.parseProperty(t)
	}
	return nil, p.errAt(t, "expected a value, a property or '(' but found "+describe(t))
}

func (p *parser) parseFunction(name token) (node, error) {
	p.next() // (
	switch fn := strings.ToLower(name.text); fn {
	case "newid":
		if !p.allowNew {
			return nil, p.errAt(name, "newid() is allowed only in actions: a filter must decide the same for every copy of a message")
		}
		if _, err := p.expectOp(")"); err != nil {
			return nil, err
		}
		return newIDNode{}, nil
	case "property", "p":
		if err := p.enter(name); err != nil {
			return nil, err
		}
		defer p.leave()
		arg, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if _, err := p.expectOp(")"); err != nil {
			return nil, err
		}
		return p.checkHeight(&propertyNode{fn: fn, name: arg, h: maxHeight(arg)}, name)
	}
	return nil, p.errAt(name, "unknown function "+name.text+"(); the functions are newid(), property() and p()")
}

// parseProperty reads [scope.]name starting at t.
func (p *parser) parseProperty(t token) (node, error) {
	switch t.kind {
	case tokIdent:
		if keywords[strings.ToLower(t.text)] {
			return nil, p.errAt(t, t.text+" is a reserved word; write ["+t.text+"] for a property of that name")
		}
	case tokQuotedIdent:
	default:
		return nil, p.errAt(t, "expected a property name but found "+describe(t))
	}
	if !isOp(p.peek(), ".") {
		return &userNode{name: t.text}, nil
	}
	if t.kind != tokIdent {
		return nil, p.errAt(t, "a scope is sys or user, not "+describe(t))
	}
	scope := strings.ToLower(t.text)
	if scope != "sys" && scope != "user" {
		return nil, p.errAt(t, "unknown scope "+t.text+"; the scopes are sys and user")
	}
	p.next() // .
	nt := p.next()
	if nt.kind != tokIdent && nt.kind != tokQuotedIdent {
		return nil, p.errAt(nt, "expected a property name after "+t.text+". but found "+describe(nt))
	}
	if scope == "user" {
		return &userNode{name: nt.text}, nil
	}
	sp, ok := lookupSys(nt.text)
	if !ok {
		return nil, p.errAt(nt, "there is no system property "+nt.text)
	}
	return &sysNode{p: sp}, nil
}

func (p *parser) param(t token) (value, error) {
	x, ok := p.params[t.text]
	if !ok {
		x, ok = p.params[t.text[1:]]
	}
	if !ok {
		return value{}, p.errAt(t, "the parameter "+t.text+" has no value")
	}
	v := fromAny(x)
	if v.kind == kindOther {
		return value{}, p.errAt(t, "the parameter "+t.text+" has a value of a type filters cannot use")
	}
	return v, nil
}

// parseCondition parses a whole filter text.
func parseCondition(text string, params map[string]any, lim limits) (node, error) {
	p, err := newParser(text, params, lim)
	if err != nil {
		return nil, err
	}
	start := p.peek()
	if start.kind == tokEOF {
		return nil, p.errAt(start, "the filter is empty")
	}
	n, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, p.errAt(t, "unexpected "+describe(t)+" after a complete filter")
	}
	if err := p.checkCondition(n, start, "a filter"); err != nil {
		return nil, err
	}
	return n, nil
}
