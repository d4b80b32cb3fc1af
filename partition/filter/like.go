package filter

import "unicode/utf8"

// likePattern is a compiled LIKE pattern: % matches any run of characters,
// _ exactly one, anything else (or an escaped % or _) itself. Matching is
// on characters (runes), case-sensitive.
type likePattern struct {
	elems []likeElem
}

type likeElem struct {
	kind byte // 'c' a literal rune, '_' any one rune, '%' any run
	r    rune
}

func compileLike(pattern string, escape rune, hasEscape bool) (likePattern, string) {
	var p likePattern
	escaped := false
	for _, r := range pattern {
		switch {
		case escaped:
			p.elems = append(p.elems, likeElem{kind: 'c', r: r})
			escaped = false
		case hasEscape && r == escape:
			escaped = true
		case r == '%':
			// %% is the same as %: keep one, so matching never
			// backtracks over an empty run twice.
			if n := len(p.elems); n > 0 && p.elems[n-1].kind == '%' {
				continue
			}
			p.elems = append(p.elems, likeElem{kind: '%'})
		case r == '_':
			p.elems = append(p.elems, likeElem{kind: '_'})
		default:
			p.elems = append(p.elems, likeElem{kind: 'c', r: r})
		}
	}
	if escaped {
		return p, "the LIKE pattern ends with its escape character"
	}
	return p, ""
}

// match reports whether s matches the whole pattern. It is the classic
// wildcard matcher that, on a mismatch, resumes after the last % one
// character further: O(len(s) * len(pattern)) at worst, never exponential.
func (p likePattern) match(s string) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		r, size := utf8.DecodeRuneInString(s[si:])
		if pi < len(p.elems) {
			e := p.elems[pi]
			switch {
			case e.kind == '%':
				starP, starS = pi, si
				pi++
				continue
			case e.kind == '_' || e.r == r:
				pi++
				si += size
				continue
			}
		}
		if starP < 0 {
			return false
		}
		// Let the last % swallow one more character and try again.
		_, size = utf8.DecodeRuneInString(s[starS:])
		starS += size
		pi, si = starP+1, starS
	}
	for pi < len(p.elems) && p.elems[pi].kind == '%' {
		pi++
	}
	return pi == len(p.elems)
}
