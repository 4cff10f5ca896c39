package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
)

// charMode says how a regex character is spelled in the output: as its
// UTF-8 bytes, or as it appears inside a JSON string literal (escaped).
type charMode int

const (
	charRaw charMode = iota
	charJSON
)

// jsonChars matches one code point in [lo, hi] as written inside a JSON
// string: printable characters raw, '"', '\' and controls escaped.
func jsonChars(lo, hi rune) *expr {
	var alts []*expr
	add := func(a, b rune) {
		if a <= b {
			alts = append(alts, eRunes(a, b))
		}
	}
	// Safe runs: [0x20,0x21], [0x23,0x5B], [0x5D, max].
	clip := func(a, b rune) {
		if a < lo {
			a = lo
		}
		if b > hi {
			b = hi
		}
		add(a, b)
	}
	clip(0x20, 0x21)
	clip(0x23, 0x5B)
	clip(0x5D, unicode.MaxRune)
	for r := lo; r <= hi && r < 0x20; r++ {
		alts = append(alts, eLit(jsonEscape(r)))
	}
	if lo <= '"' && '"' <= hi {
		alts = append(alts, eLit(`\"`))
	}
	if lo <= '\\' && '\\' <= hi {
		alts = append(alts, eLit(`\\`))
	}
	return eAlt(alts...)
}

func jsonEscape(r rune) string {
	switch r {
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '"':
		return `\"`
	case '\\':
		return `\\`
	}
	return fmt.Sprintf(`\u%04x`, r)
}

func modeChars(mode charMode, lo, hi rune) *expr {
	if mode == charJSON {
		return jsonChars(lo, hi)
	}
	return eRunes(lo, hi)
}

// parseRegex parses Go RE2 syntax. anchoredDefault says whether a pattern
// without ^ / $ must match whole (regex grammars) or may match anywhere
// (JSON Schema "pattern", which searches).
func parseRegex(pattern string, mode charMode, search bool) (*expr, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	re = re.Simplify()
	var items []*syntax.Regexp
	if re.Op == syntax.OpConcat {
		items = re.Sub
	} else {
		items = []*syntax.Regexp{re}
	}
	startAnch, endAnch := false, false
	for len(items) > 0 && (items[0].Op == syntax.OpBeginText || items[0].Op == syntax.OpBeginLine) {
		items = items[1:]
		startAnch = true
	}
	for len(items) > 0 && (items[len(items)-1].Op == syntax.OpEndText || items[len(items)-1].Op == syntax.OpEndLine) {
		items = items[:len(items)-1]
		endAnch = true
	}
	var parts []*expr
	if search && !startAnch {
		parts = append(parts, eStar(modeChars(mode, 0, unicode.MaxRune)))
	}
	for _, it := range items {
		e, err := reToExpr(it, mode)
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	}
	if search && !endAnch {
		parts = append(parts, eStar(modeChars(mode, 0, unicode.MaxRune)))
	}
	return eSeq(parts...), nil
}

func reToExpr(re *syntax.Regexp, mode charMode) (*expr, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return eNone, nil
	case syntax.OpEmptyMatch:
		return eEmpty, nil
	case syntax.OpLiteral:
		var parts []*expr
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				var alts []*expr
				f := r
				for {
					alts = append(alts, modeChars(mode, f, f))
					f = unicode.SimpleFold(f)
					if f == r {
						break
					}
				}
				parts = append(parts, eAlt(alts...))
			} else {
				parts = append(parts, modeChars(mode, r, r))
			}
		}
		return eSeq(parts...), nil
	case syntax.OpCharClass:
		var alts []*expr
		for i := 0; i+1 < len(re.Rune); i += 2 {
			alts = append(alts, modeChars(mode, re.Rune[i], re.Rune[i+1]))
		}
		return eAlt(alts...), nil
	case syntax.OpAnyCharNotNL:
		return eAlt(modeChars(mode, 0, '\n'-1), modeChars(mode, '\n'+1, unicode.MaxRune)), nil
	case syntax.OpAnyChar:
		return modeChars(mode, 0, unicode.MaxRune), nil
	case syntax.OpCapture:
		return reToExpr(re.Sub[0], mode)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		sub, err := reToExpr(re.Sub[0], mode)
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return eStar(sub), nil
		case syntax.OpPlus:
			return eRep(sub, 1, -1), nil
		case syntax.OpQuest:
			return eOpt(sub), nil
		}
		return eRep(sub, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		subs := make([]*expr, len(re.Sub))
		for i, s := range re.Sub {
			e, err := reToExpr(s, mode)
			if err != nil {
				return nil, err
			}
			subs[i] = e
		}
		if re.Op == syntax.OpConcat {
			return eSeq(subs...), nil
		}
		return eAlt(subs...), nil
	}
	return nil, fmt.Errorf("unsupported regex construct %q (anchors only at the ends; no word boundaries)", re.String())
}

// RegexGrammar compiles a Go RE2 regular expression that the whole output
// must match.
func RegexGrammar(pattern string) (*Grammar, error) {
	e, err := parseRegex(pattern, charRaw, false)
	if err != nil {
		return nil, &Error{Location: "regex", Keyword: "pattern", Msg: err.Error()}
	}
	b := &builder{}
	r := b.rule("root")
	b.set(r, e)
	return finishGrammar(b, r)
}

// ChoiceGrammar compiles "exactly one of these strings".
func ChoiceGrammar(choices []string) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, &Error{Location: "choice", Msg: "no choices"}
	}
	alts := make([]*expr, len(choices))
	for i, c := range choices {
		alts[i] = eLit(c)
	}
	b := &builder{}
	r := b.rule("root")
	b.set(r, eAlt(alts...))
	return finishGrammar(b, r)
}
