package filter

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tokEOF         tokKind = iota
	tokIdent               // regular identifier or keyword; text holds it as written
	tokQuotedIdent         // [name] or "name", unescaped in text
	tokString              // 'text', unescaped in text
	tokInt
	tokFloat
	tokParam // @name; text holds the name with its @
	tokOp    // punctuation and operators; text holds it
)

type token struct {
	kind tokKind
	text string
	pos  int // 1-based rune position of the first character
}

// keywords are reserved: a property with one of these names must be
// written [bracketed].
var keywords = map[string]bool{
	"and": true, "or": true, "not": true, "is": true, "null": true,
	"like": true, "escape": true, "in": true, "exists": true,
	"true": true, "false": true, "set": true, "remove": true,
}

// lex splits text into tokens. Positions count runes from 1.
func lex(text string) ([]token, error) {
	var toks []token
	pos := 1 // rune position of text[i]
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		start := pos
		switch {
		case r == utf8.RuneError && size == 1:
			return nil, &SyntaxError{Pos: start, Msg: "the text is not valid UTF-8"}
		case unicode.IsSpace(r):
			i += size
			pos++
			continue
		case unicode.IsLetter(r) || r == '_':
			j, n := scanWord(text, i)
			toks = append(toks, token{kind: tokIdent, text: text[i:j], pos: start})
			i, pos = j, pos+n
			continue
		case r == '@':
			j, n := scanWord(text, i+1)
			if n == 0 {
				return nil, &SyntaxError{Pos: start, Msg: "@ must be followed by a parameter name"}
			}
			toks = append(toks, token{kind: tokParam, text: text[i:j], pos: start})
			i, pos = j, pos+n+1
			continue
		case r >= '0' && r <= '9':
			tok, j, err := scanNumber(text, i, start)
			if err != nil {
				return nil, err
			}
			toks = append(toks, tok)
			pos += j - i // digits, '.', 'E', signs: one byte each
			i = j
			continue
		case r == '\'' || r == '"' || r == '[':
			closer := r
			kind := tokQuotedIdent
			what := "quoted name"
			switch r {
			case '\'':
				kind, what = tokString, "string"
			case '[':
				closer, what = ']', "bracketed name"
			}
			s, j, n, ok := scanQuoted(text, i+1, byte(closer))
			if !ok {
				return nil, &SyntaxError{Pos: start, Msg: "unterminated " + what}
			}
			if kind == tokQuotedIdent && s == "" {
				return nil, &SyntaxError{Pos: start, Msg: "empty " + what}
			}
			toks = append(toks, token{kind: kind, text: s, pos: start})
			i, pos = j, pos+n+1
			continue
		}
		op := scanOp(text[i:])
		if op == "" {
			return nil, &SyntaxError{Pos: start, Msg: "unexpected character " + quoteRune(r)}
		}
		toks = append(toks, token{kind: tokOp, text: op, pos: start})
		i += len(op)
		pos += len(op)
	}
	toks = append(toks, token{kind: tokEOF, pos: pos})
	return toks, nil
}

// scanWord returns the end of the identifier that starts at i and its
// length in runes.
func scanWord(text string, i int) (end, runes int) {
	for i < len(text) {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') {
			break
		}
		i += size
		runes++
	}
	return i, runes
}

// scanNumber reads [0-9]+[.[0-9]*][E[+|-][0-9]+].
func scanNumber(text string, i, pos int) (token, int, error) {
	start := i
	digits := func() {
		for i < len(text) && text[i] >= '0' && text[i] <= '9' {
			i++
		}
	}
	digits()
	kind := tokInt
	if i < len(text) && text[i] == '.' {
		kind = tokFloat
		i++
		digits()
	}
	if i < len(text) && (text[i] == 'e' || text[i] == 'E') {
		kind = tokFloat
		i++
		if i < len(text) && (text[i] == '+' || text[i] == '-') {
			i++
		}
		d := i
		digits()
		if i == d {
			return token{}, 0, &SyntaxError{Pos: pos + (i - start), Msg: "the exponent of a number needs digits"}
		}
	}
	if i < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[i:]); unicode.IsLetter(r) || r == '_' {
			return token{}, 0, &SyntaxError{Pos: pos + (i - start), Msg: "a number must not run into a name"}
		}
	}
	return token{kind: kind, text: text[start:i], pos: pos}, i, nil
}

// scanQuoted reads up to the closing delimiter, a doubled delimiter
// standing for itself. It returns the unescaped text, the index after the
// closer and the runes consumed including the closer.
func scanQuoted(text string, i int, closer byte) (string, int, int, bool) {
	var b strings.Builder
	runes := 0
	for i < len(text) {
		if text[i] == closer {
			if i+1 < len(text) && text[i+1] == closer {
				b.WriteByte(closer)
				i += 2
				runes += 2
				continue
			}
			return b.String(), i + 1, runes + 1, true
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == utf8.RuneError && size == 1 {
			return "", 0, 0, false
		}
		b.WriteString(text[i : i+size])
		i += size
		runes++
	}
	return "", 0, 0, false
}

var ops = []string{"<>", "!=", ">=", "<=", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",", ";", "."}

func scanOp(s string) string {
	for _, op := range ops {
		if strings.HasPrefix(s, op) {
			return op
		}
	}
	return ""
}

func quoteRune(r rune) string { return strconv.QuoteRune(r) }
