package grammar

import (
	"fmt"
	"unicode"
)

func hexDigit() *expr {
	var s byteSet
	s.addRange('0', '9')
	s.addRange('a', 'f')
	s.addRange('A', 'F')
	return eSet(s)
}

// jsonStrChar is one character of a JSON string: raw UTF-8 except '"', '\'
// and controls, or an escape. \u escapes of surrogates are left out so that
// every text decodes to valid Unicode with a well-defined length.
func jsonStrChar() *expr {
	h := hexDigit()
	var nonSur1, sur byteSet
	nonSur1.addRange('0', '9')
	nonSur1.addRange('a', 'c')
	nonSur1.addRange('A', 'C')
	nonSur1.addRange('e', 'f')
	nonSur1.addRange('E', 'F')
	sur.addRange('d', 'd')
	sur.addRange('D', 'D')
	u := eAlt(eSeq(eSet(nonSur1), h, h, h), eSeq(eSet(sur), eRange('0', '7'), h, h))
	var esc byteSet
	for _, b := range []byte(`"\/bfnrt`) {
		esc.addRange(b, b)
	}
	return eAlt(eRunes(0x20, 0x21), eRunes(0x23, 0x5B), eRunes(0x5D, unicode.MaxRune),
		eSeq(eLit(`\`), eAlt(eSet(esc), eSeq(eLit("u"), u))))
}

func (c *schemaCompiler) stringRule() *expr {
	if c.strRule < 0 {
		c.strRule = c.b.rule("string")
		c.b.set(c.strRule, eSeq(eLit(`"`), eStar(jsonStrChar()), eLit(`"`)))
	}
	return eRef(c.strRule)
}

func digits() *expr { return eRange('0', '9') }

func jsonInteger() *expr {
	return eSeq(eOpt(eLit("-")), eAlt(eLit("0"), eSeq(eRange('1', '9'), eStar(digits()))))
}

func jsonNumber() *expr {
	var e byteSet
	e.addRange('e', 'e')
	e.addRange('E', 'E')
	var pm byteSet
	pm.addRange('+', '+')
	pm.addRange('-', '-')
	return eSeq(jsonInteger(), eOpt(eSeq(eLit("."), eRep(digits(), 1, -1))),
		eOpt(eSeq(eSet(e), eOpt(eSet(pm)), eRep(digits(), 1, 3))))
}

// anyValue is a rule for any JSON value laid out for depth.
func (c *schemaCompiler) anyValue(depth int) *expr {
	k := c.dkey(depth)
	if r, ok := c.anyRules[k]; ok {
		return eRef(r)
	}
	r := c.b.rule(fmt.Sprintf("value@%d", k))
	c.anyRules[k] = r
	scalars := []*expr{eLit("null"), eLit("true"), eLit("false"), jsonNumber(), c.stringRule()}
	if c.opt.Whitespace == Indent && depth >= maxIndentDepth {
		c.b.set(r, eAlt(scalars...))
		return eRef(r)
	}
	inner := c.anyValue(depth + 1)
	first, between, last := c.seps(depth)
	arr := eAlt(eLit("[]"), eSeq(eLit("["), first, inner, eStar(eSeq(between, inner)), last, eLit("]")))
	if c.opt.Whitespace == AnyWhitespace {
		arr = eAlt(eSeq(eLit("["), c.ws(), eLit("]")), eSeq(eLit("["), first, inner, eStar(eSeq(between, inner)), last, eLit("]")))
	}
	member := eSeq(c.stringRule(), c.colon(), inner)
	obj := eAlt(eSeq(eLit("{"), c.wsEmpty(), eLit("}")), eSeq(eLit("{"), first, member, eStar(eSeq(between, member)), last, eLit("}")))
	c.b.set(r, eAlt(append(scalars, arr, obj)...))
	return eRef(r)
}

func (c *schemaCompiler) wsEmpty() *expr {
	if c.opt.Whitespace == AnyWhitespace {
		return c.ws()
	}
	return eEmpty
}
