package filter

import "strings"

// Action is a compiled SQL rule action: SET and REMOVE statements applied,
// in order, to a subscription's copy of a message.
type Action struct {
	text  string
	stmts []statement
}

type statement struct {
	target node // *sysNode or *userNode
	expr   node // nil: REMOVE
}

// CompileAction compiles a SqlRuleAction expression:
//
//	SET sys.Label = 'x'; SET user.n = user.n + 1
//	SET a = 1, b = 2
//	REMOVE a, b
//
// Statements are separated by ';', ',' or nothing; after a ',' a
// statement may omit SET or REMOVE and continue the verb before it; a
// trailing ';' is allowed. Only writable system properties may be targets. params binds
// @parameters as in CompileSQL.
func CompileAction(text string, params map[string]any) (*Action, error) {
	return compileAction(text, params, azureLimits)
}

func compileAction(text string, params map[string]any, lim limits) (*Action, error) {
	p, err := newParser(text, params, lim)
	if err != nil {
		return nil, err
	}
	p.allowNew = true
	if p.peek().kind == tokEOF {
		return nil, p.errAt(p.peek(), "the action is empty")
	}
	a := &Action{text: text}
	verb := ""
	for {
		t := p.peek()
		switch {
		case isKeyword(t, "set"), isKeyword(t, "remove"):
			p.next()
			verb = strings.ToLower(t.text)
		case verb == "":
			return nil, p.errAt(t, "expected SET or REMOVE but found "+describe(t))
		}
		st, err := p.parseStatement(verb)
		if err != nil {
			return nil, err
		}
		a.stmts = append(a.stmts, st)
		if t := p.peek(); isKeyword(t, "set") || isKeyword(t, "remove") {
			continue // statements need no separator: <action> [;]
		}
		sep := p.next()
		switch {
		case sep.kind == tokEOF:
			return a, nil
		case isOp(sep, ";"):
			if p.peek().kind == tokEOF {
				return a, nil
			}
			verb = "" // a new statement must name its verb
		case isOp(sep, ","):
		default:
			return nil, p.errAt(sep, "expected ';', ',' or the end of the action but found "+describe(sep))
		}
	}
}

func (p *parser) parseStatement(verb string) (statement, error) {
	t := p.next()
	target, err := p.parseProperty(t)
	if err != nil {
		return statement{}, err
	}
	if s, ok := target.(*sysNode); ok && !sysProps[s.p].writable {
		return statement{}, p.errAt(t, "sys."+sysProps[s.p].name+" cannot be changed by an action")
	}
	if verb == "remove" {
		return statement{target: target}, nil
	}
	if _, err := p.expectOp("="); err != nil {
		return statement{}, err
	}
	x, err := p.parseExpr()
	if err != nil {
		return statement{}, err
	}
	return statement{target: target, expr: x}, nil
}

// Apply returns a copy of m changed by the action; m is left as it was.
// newID supplies newid()'s values; it may be nil when the action does not
// call newid(). Every expression reads the message as the previous
// statements left it. An error wraps ErrEvaluation.
func (a *Action) Apply(m *Message, newID func() UUID) (*Message, error) {
	c := m.Clone()
	e := env{msg: c, newID: newID}
	for _, st := range a.stmts {
		var v value
		if st.expr != nil {
			var err error
			if v, err = st.expr.eval(e); err != nil {
				return nil, err
			}
		}
		switch t := st.target.(type) {
		case *sysNode:
			if err := setSys(c, t.p, v); err != nil {
				return nil, err
			}
		case *userNode:
			if st.expr == nil {
				delete(c.Properties, t.name)
				continue
			}
			if c.Properties == nil {
				c.Properties = make(map[string]any)
			}
			c.Properties[t.name] = v.toAny()
		}
	}
	return c, nil
}

// Text is the action as it was written.
func (a *Action) Text() string { return a.text }

// String is the action in a canonical form that compiles back to the same
// action.
func (a *Action) String() string {
	var b strings.Builder
	for i, st := range a.stmts {
		if i > 0 {
			b.WriteString("; ")
		}
		if st.expr == nil {
			b.WriteString("REMOVE ")
			st.target.print(&b)
			continue
		}
		b.WriteString("SET ")
		st.target.print(&b)
		b.WriteString(" = ")
		st.expr.print(&b)
	}
	return b.String()
}
