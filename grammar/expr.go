package grammar

import (
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// byteSet is a set of byte values.
type byteSet [4]uint64

func (s *byteSet) addRange(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (uint(b) & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(uint(b)&63)) != 0 }

func (s *byteSet) empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

func (s *byteSet) count() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}

type opKind uint8

const (
	opEmpty  opKind = iota // matches ""
	opNone                 // matches nothing
	opBytes                // one byte from set
	opSeq                  // concatenation
	opAlt                  // alternation
	opRepeat               // subs[0]{min,max}; max < 0 is unbounded
	opRef                  // call of rule ref
	opGraph                // explicit automaton whose edges are expressions
)

// expr is the one grammar representation every front end (JSON Schema,
// regex, EBNF, choice) compiles to: byte-level regular expressions with
// calls of named rules, which makes it a context-free grammar.
type expr struct {
	op       opKind
	set      byteSet
	subs     []*expr
	min, max int
	ref      int
	// opGraph: states 0..gn-1, start gstart, accepting gfinal.
	gn     int
	gstart int
	gfinal []int
	gedges []gedge
}

type gedge struct {
	from, to int
	e        *expr
}

var (
	eEmpty = &expr{op: opEmpty}
	eNone  = &expr{op: opNone}
)

func eByte(b byte) *expr {
	e := &expr{op: opBytes}
	e.set.addRange(b, b)
	return e
}

func eRange(lo, hi byte) *expr {
	e := &expr{op: opBytes}
	e.set.addRange(lo, hi)
	return e
}

func eSet(s byteSet) *expr {
	if s.empty() {
		return eNone
	}
	return &expr{op: opBytes, set: s}
}

func eLit(s string) *expr {
	if len(s) == 0 {
		return eEmpty
	}
	if len(s) == 1 {
		return eByte(s[0])
	}
	subs := make([]*expr, len(s))
	for i := 0; i < len(s); i++ {
		subs[i] = eByte(s[i])
	}
	return &expr{op: opSeq, subs: subs}
}

func eSeq(subs ...*expr) *expr {
	out := make([]*expr, 0, len(subs))
	for _, s := range subs {
		switch s.op {
		case opEmpty:
			continue
		case opNone:
			return eNone
		case opSeq:
			out = append(out, s.subs...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return eEmpty
	case 1:
		return out[0]
	}
	return &expr{op: opSeq, subs: out}
}

func eAlt(subs ...*expr) *expr {
	out := make([]*expr, 0, len(subs))
	for _, s := range subs {
		switch s.op {
		case opNone:
			continue
		case opAlt:
			out = append(out, s.subs...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return eNone
	case 1:
		return out[0]
	}
	return &expr{op: opAlt, subs: out}
}

func eRep(e *expr, min, max int) *expr {
	if max >= 0 && max < min {
		return eNone
	}
	if max == 0 || e.op == opEmpty {
		return eEmpty
	}
	if e.op == opNone {
		if min == 0 {
			return eEmpty
		}
		return eNone
	}
	if min == 1 && max == 1 {
		return e
	}
	return &expr{op: opRepeat, subs: []*expr{e}, min: min, max: max}
}

func eOpt(e *expr) *expr  { return eRep(e, 0, 1) }
func eStar(e *expr) *expr { return eRep(e, 0, -1) }
func eRef(r int) *expr    { return &expr{op: opRef, ref: r} }

// eRunes matches one UTF-8 encoded code point in [lo, hi].
func eRunes(lo, hi rune) *expr {
	var alts []*expr
	utf8Ranges(lo, hi, func(los, his []byte) {
		subs := make([]*expr, len(los))
		for i := range los {
			subs[i] = eRange(los[i], his[i])
		}
		alts = append(alts, eSeq(subs...))
	})
	return eAlt(alts...)
}

// utf8Ranges splits [lo, hi] into ranges whose UTF-8 encodings are a fixed
// sequence of byte ranges, calling f for each; surrogates are skipped.
func utf8Ranges(lo, hi rune, f func(los, his []byte)) {
	if hi > utf8.MaxRune {
		hi = utf8.MaxRune
	}
	if lo > hi {
		return
	}
	if lo <= 0xD7FF && hi >= 0xD800 {
		utf8Ranges(lo, 0xD7FF, f)
		utf8Ranges(0xE000, hi, f)
		return
	}
	if lo >= 0xD800 && hi <= 0xDFFF {
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
		if lo > hi {
			return
		}
	}
	// Split at encoding-length boundaries.
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			utf8Ranges(lo, m, f)
			utf8Ranges(m+1, hi, f)
			return
		}
	}
	if hi <= 0x7F {
		f([]byte{byte(lo)}, []byte{byte(hi)})
		return
	}
	// Split so that all but a prefix of continuation bytes span full ranges.
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*uint(i)) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Ranges(lo, lo|m, f)
				utf8Ranges((lo|m)+1, hi, f)
				return
			}
			if hi&m != m {
				utf8Ranges(lo, (hi&^m)-1, f)
				utf8Ranges(hi&^m, hi, f)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	f(append([]byte(nil), a[:n]...), append([]byte(nil), b[:n]...))
}

// builder collects named rules while a front end compiles.
type builder struct {
	names  []string
	bodies []*expr
}

func (b *builder) rule(name string) int {
	b.names = append(b.names, name)
	b.bodies = append(b.bodies, nil)
	return len(b.names) - 1
}

func (b *builder) set(r int, e *expr) { b.bodies[r] = e }

// Error is a compile error for a schema, regex or grammar. Location is a
// JSON pointer ("#/properties/a/pattern") for schemas, a byte offset or
// rule name otherwise; Keyword names the construct that failed.
type Error struct {
	Location string
	Keyword  string
	Msg      string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Keyword != "" {
		return fmt.Sprintf("grammar: %s: %s: %s", e.Location, e.Keyword, e.Msg)
	}
	return fmt.Sprintf("grammar: %s: %s", e.Location, e.Msg)
}
