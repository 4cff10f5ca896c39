package grammar

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// EBNFGrammar compiles a GBNF-style grammar (llama.cpp's notation):
//
//	root   ::= "{" ws item ("," ws item)* "}"
//	item   ::= [a-z]+ | "\"" [^"\\]* "\""
//	ws     ::= [ \t\n]*
//
// Rules are `name ::= body`; bodies use "literals" with \n \t \r \\ \"
// \xHH \uHHHH \UHHHHHHHH escapes, [character classes] (ranges, ^ negation),
// `.` (any character), rule names, ( groups ), alternation |, and the
// repetitions * + ? {m} {m,} {m,n}. `#` starts a comment. The start rule
// is "root", or the first rule when there is none. Left recursion is
// rejected.
func EBNFGrammar(src string) (*Grammar, error) {
	p := &ebnfParser{src: src, b: &builder{}, rules: map[string]int{}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	root, ok := p.rules["root"]
	if !ok {
		root = p.first
	}
	for name, r := range p.rules {
		if p.b.bodies[r] == nil {
			return nil, &Error{Location: "rule " + name, Keyword: "ebnf", Msg: "rule is used but never defined"}
		}
	}
	return finishGrammar(p.b, root)
}

type ebnfParser struct {
	src   string
	i     int
	b     *builder
	rules map[string]int
	first int
	line  int
}

func (p *ebnfParser) errf(format string, args ...any) error {
	line, col := 1, 1
	for _, c := range p.src[:p.i] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &Error{Location: fmt.Sprintf("line %d col %d", line, col), Keyword: "ebnf", Msg: fmt.Sprintf(format, args...)}
}

// skip passes spaces, newlines (when nl) and comments.
func (p *ebnfParser) skip(nl bool) {
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			p.i++
		case c == '\n' && nl:
			p.i++
		case c == '#':
			for p.i < len(p.src) && p.src[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *ebnfParser) name() string {
	s := p.i
	for p.i < len(p.src) && isNameByte(p.src[p.i]) {
		p.i++
	}
	return p.src[s:p.i]
}

func (p *ebnfParser) ruleIndex(name string) int {
	if r, ok := p.rules[name]; ok {
		return r
	}
	r := p.b.rule(name)
	p.rules[name] = r
	return r
}

// atRuleStart reports whether `name ::=` starts here.
func (p *ebnfParser) atRuleStart() bool {
	save := p.i
	defer func() { p.i = save }()
	if p.name() == "" {
		return false
	}
	p.skip(false)
	return len(p.src)-p.i >= 3 && p.src[p.i:p.i+3] == "::="
}

func (p *ebnfParser) parse() error {
	p.first = -1
	for {
		p.skip(true)
		if p.i >= len(p.src) {
			break
		}
		start := p.i
		name := p.name()
		if name == "" {
			return p.errf("expected a rule name")
		}
		p.skip(false)
		if len(p.src)-p.i < 3 || p.src[p.i:p.i+3] != "::=" {
			p.i = start
			return p.errf("expected ::= after rule name %q", name)
		}
		p.i += 3
		r := p.ruleIndex(name)
		if p.b.bodies[r] != nil {
			p.i = start
			return p.errf("rule %q defined twice", name)
		}
		if p.first < 0 {
			p.first = r
		}
		e, err := p.alt(0)
		if err != nil {
			return err
		}
		p.b.set(r, e)
	}
	if p.first < 0 {
		return &Error{Location: "line 1 col 1", Keyword: "ebnf", Msg: "grammar has no rules"}
	}
	return nil
}

func (p *ebnfParser) alt(depth int) (*expr, error) {
	if depth > 200 {
		return nil, p.errf("nesting too deep")
	}
	var alts []*expr
	for {
		s, err := p.seq(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		p.skip(depth > 0)
		if p.i < len(p.src) && p.src[p.i] == '|' {
			p.i++
			continue
		}
		// A body may continue on the next line with "|".
		save := p.i
		p.skip(true)
		if p.i < len(p.src) && p.src[p.i] == '|' {
			p.i++
			continue
		}
		p.i = save
		return eAlt(alts...), nil
	}
}

func (p *ebnfParser) seq(depth int) (*expr, error) {
	var items []*expr
	for {
		p.skip(depth > 0)
		if p.i >= len(p.src) {
			break
		}
		c := p.src[p.i]
		if c == '|' || c == ')' || c == '\n' {
			break
		}
		if depth == 0 && p.atRuleStart() {
			break
		}
		var e *expr
		var err error
		switch {
		case c == '"':
			e, err = p.literal()
		case c == '[':
			e, err = p.class()
		case c == '.':
			p.i++
			e = eRunes(0, unicode.MaxRune)
		case c == '(':
			p.i++
			e, err = p.alt(depth + 1)
			if err == nil {
				p.skip(true)
				if p.i >= len(p.src) || p.src[p.i] != ')' {
					return nil, p.errf("expected )")
				}
				p.i++
			}
		case isNameByte(c):
			n := p.name()
			e = eRef(p.ruleIndex(n))
		default:
			return nil, p.errf("unexpected %q", c)
		}
		if err != nil {
			return nil, err
		}
		e, err = p.postfix(e)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return eSeq(items...), nil
}

func (p *ebnfParser) postfix(e *expr) (*expr, error) {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case '*':
			e = eStar(e)
		case '+':
			e = eRep(e, 1, -1)
		case '?':
			e = eOpt(e)
		case '{':
			p.i++
			m, ok := p.int()
			if !ok {
				return nil, p.errf("expected a count after {")
			}
			n := m
			if p.i < len(p.src) && p.src[p.i] == ',' {
				p.i++
				if p.i < len(p.src) && p.src[p.i] == '}' {
					n = -1
				} else if n, ok = p.int(); !ok {
					return nil, p.errf("expected a count after ,")
				}
			}
			if p.i >= len(p.src) || p.src[p.i] != '}' {
				return nil, p.errf("expected }")
			}
			if n >= 0 && n < m || m > 10000 || n > 10000 {
				return nil, p.errf("bad repetition {%d,%d}", m, n)
			}
			e = eRep(e, m, n)
			if exprSize(e, maxNFAStates) > maxNFAStates {
				return nil, p.errf("repetition {%d,%d} expands to more than %d automaton states (limit maxNFAStates)", m, n, maxNFAStates)
			}
		default:
			return e, nil
		}
		p.i++
	}
	return e, nil
}

func (p *ebnfParser) int() (int, bool) {
	s := p.i
	for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
		p.i++
	}
	if s == p.i || p.i-s > 6 {
		return 0, false
	}
	n, _ := strconv.Atoi(p.src[s:p.i])
	return n, true
}

// char reads one possibly escaped character of a literal or class.
func (p *ebnfParser) char() (rune, error) {
	if p.i >= len(p.src) {
		return 0, p.errf("unterminated literal")
	}
	c := p.src[p.i]
	if c != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.i:])
		if r == utf8.RuneError && n <= 1 {
			return 0, p.errf("invalid UTF-8")
		}
		p.i += n
		return r, nil
	}
	p.i++
	if p.i >= len(p.src) {
		return 0, p.errf("unterminated escape")
	}
	c = p.src[p.i]
	p.i++
	switch c {
	case 'n':
		return '\n', nil
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.i+n > len(p.src) {
			return 0, p.errf("short \\%c escape", c)
		}
		v, err := strconv.ParseUint(p.src[p.i:p.i+n], 16, 32)
		if err != nil || v > unicode.MaxRune {
			return 0, p.errf("bad \\%c escape", c)
		}
		p.i += n
		return rune(v), nil
	}
	return rune(c), nil
}

func (p *ebnfParser) literal() (*expr, error) {
	p.i++ // "
	var parts []*expr
	for {
		if p.i >= len(p.src) || p.src[p.i] == '\n' {
			return nil, p.errf("unterminated literal")
		}
		if p.src[p.i] == '"' {
			p.i++
			return eSeq(parts...), nil
		}
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		parts = append(parts, eRunes(r, r))
	}
}

func (p *ebnfParser) class() (*expr, error) {
	p.i++ // [
	neg := false
	if p.i < len(p.src) && p.src[p.i] == '^' {
		neg = true
		p.i++
	}
	type rr struct{ lo, hi rune }
	var rs []rr
	for {
		if p.i >= len(p.src) || p.src[p.i] == '\n' {
			return nil, p.errf("unterminated character class")
		}
		if p.src[p.i] == ']' {
			p.i++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.i+1 < len(p.src) && p.src[p.i] == '-' && p.src[p.i+1] != ']' {
			p.i++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errf("bad range %q-%q", lo, hi)
			}
		}
		rs = append(rs, rr{lo, hi})
	}
	if neg {
		// Complement over all code points.
		var out []rr
		next := rune(0)
		sorted := append([]rr(nil), rs...)
		for i := 1; i < len(sorted); i++ {
			for j := i; j > 0 && sorted[j].lo < sorted[j-1].lo; j-- {
				sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
			}
		}
		for _, r := range sorted {
			if r.lo > next {
				out = append(out, rr{next, r.lo - 1})
			}
			if r.hi+1 > next {
				next = r.hi + 1
			}
		}
		if next <= unicode.MaxRune {
			out = append(out, rr{next, unicode.MaxRune})
		}
		rs = out
	}
	var alts []*expr
	for _, r := range rs {
		alts = append(alts, eRunes(r.lo, r.hi))
	}
	return eAlt(alts...), nil
}
