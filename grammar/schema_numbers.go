package grammar

import (
	"math/big"
	"sort"
	"strings"
)

type bound struct {
	set  bool
	v    *big.Rat
	excl bool
}

// number compiles type number or integer with its bounds. Bounds may be
// any JSON number (zod's z.number().int() emits ±9007199254740991, and
// JSON allows larger): the automaton works on decimal digit strings, so
// its size grows with the bounds' digit counts, not their values.
func (c *schemaCompiler) number(m map[string]any, path string, integer bool) (*expr, error) {
	var lo, hi bound
	rd := func(k string) (*big.Rat, bool, error) {
		v, ok := m[k]
		if !ok {
			return nil, false, nil
		}
		if b, isBool := v.(bool); isBool && (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
			// Draft 4 spelled exclusive bounds as booleans beside
			// minimum and maximum; they are read there.
			_ = b
			return nil, false, nil
		}
		r, ok := toRat(v)
		if !ok {
			return nil, false, serr(path+"/"+k, k, "must be a number")
		}
		if len(r.Num().String())+len(r.Denom().String()) > maxBoundDigits {
			return nil, false, serr(path+"/"+k, k, "bounds of more than %d digits are not supported", maxBoundDigits)
		}
		return r, true, nil
	}
	for _, k := range []string{"minimum", "exclusiveMinimum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		excl := k == "exclusiveMinimum"
		if k == "minimum" && m["exclusiveMinimum"] == true {
			excl = true
		}
		if ok && (!lo.set || r.Cmp(lo.v) > 0 || (r.Cmp(lo.v) == 0 && excl)) {
			lo = bound{true, r, excl}
		}
	}
	for _, k := range []string{"maximum", "exclusiveMaximum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		excl := k == "exclusiveMaximum"
		if k == "maximum" && m["exclusiveMaximum"] == true {
			excl = true
		}
		if ok && (!hi.set || r.Cmp(hi.v) < 0 || (r.Cmp(hi.v) == 0 && excl)) {
			hi = bound{true, r, excl}
		}
	}
	var mult int64
	if mv, ok := m["multipleOf"]; ok {
		r, ok := toRat(mv)
		if !ok || r.Sign() <= 0 {
			return nil, serr(path+"/multipleOf", "multipleOf", "must be a positive number")
		}
		if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() > 100000 {
			return nil, serr(path+"/multipleOf", "multipleOf", "only integer multipleOf up to 100000 is supported")
		}
		mult = r.Num().Int64()
		integer = true
	}
	var e *expr
	if integer {
		e = intBounded(lo, hi)
	} else if !lo.set && !hi.set {
		e = jsonNumber()
	} else {
		e = numBounded(lo, hi)
	}
	if mult > 1 {
		me := multipleOfExpr(mult)
		if lo.set || hi.set {
			var err error
			if e, err = regularOp(e, me, true); err != nil {
				return nil, serr(path+"/multipleOf", "multipleOf", "%v", err)
			}
		} else {
			e = me
		}
	}
	if e.op == opNone {
		return nil, serr(path, "minimum", "no number satisfies the bounds")
	}
	return e, nil
}

// maxBoundDigits bounds the digits of a numeric bound (numerator and
// denominator together): the digit automata grow with it.
const maxBoundDigits = 400

// intBounded matches integers within the bounds (non-integer bounds are
// rounded inward, which is exact for integers).
func intBounded(lo, hi bound) *expr {
	var l, h *big.Int // nil: unbounded
	if lo.set {
		l = ratCeil(lo.v)
		if lo.excl && lo.v.IsInt() {
			l.Add(l, big1)
		}
	}
	if hi.set {
		h = ratFloor(hi.v)
		if hi.excl && hi.v.IsInt() {
			h.Sub(h, big1)
		}
	}
	if l != nil && h != nil && l.Cmp(h) > 0 {
		return eNone
	}
	var alts []*expr
	if h == nil || h.Sign() >= 0 {
		a := new(big.Int)
		if l != nil && l.Sign() > 0 {
			a.Set(l)
		}
		alts = append(alts, digitsRange(a, h))
	}
	if l == nil || l.Sign() < 0 {
		// Magnitudes of the negative part: [max(1, -h), -l].
		a := big.NewInt(1)
		if h != nil && h.Sign() < 0 {
			a.Neg(h)
		}
		var b *big.Int
		if l != nil {
			b = new(big.Int).Neg(l)
		}
		alts = append(alts, eSeq(eLit("-"), digitsRange(a, b)))
	}
	return eAlt(alts...)
}

var big1 = big.NewInt(1)

func ratFloor(r *big.Rat) *big.Int {
	q := new(big.Int)
	q.Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	return q
}

func ratCeil(r *big.Rat) *big.Int {
	f := ratFloor(r)
	if !r.IsInt() {
		f.Add(f, big1)
	}
	return f
}

// numBounded matches decimal numbers (no exponent) within the bounds.
// Bounds are rounded inward to integers: exact for integer bounds, a safe
// subset otherwise.
func numBounded(lo, hi bound) *expr {
	// Round non-integer bounds inward to inclusive integer bounds.
	if lo.set && !lo.v.IsInt() {
		lo = bound{true, new(big.Rat).SetInt(ratCeil(lo.v)), false}
	}
	if hi.set && !hi.v.IsInt() {
		hi = bound{true, new(big.Rat).SetInt(ratFloor(hi.v)), false}
	}
	in := func(x *big.Rat) bool {
		if lo.set {
			c := x.Cmp(lo.v)
			if c < 0 || (c == 0 && lo.excl) {
				return false
			}
		}
		if hi.set {
			c := x.Cmp(hi.v)
			if c > 0 || (c == 0 && hi.excl) {
				return false
			}
		}
		return true
	}
	half := big.NewRat(1, 2)
	var alts []*expr
	for _, neg := range []bool{false, true} {
		// Critical magnitudes: 0 and the bounds' (mirrored for the
		// negative half); each is its own segment, the gaps between them
		// are segments where membership is uniform.
		var cs []*big.Int
		add := func(v *big.Int) {
			for _, x := range cs {
				if x.Cmp(v) == 0 {
					return
				}
			}
			cs = append(cs, v)
		}
		if neg {
			add(new(big.Int)) // "-0" is excluded, so 0 is its own segment
		}
		for _, b := range []bound{lo, hi} {
			if b.set {
				v := new(big.Int).Set(b.v.Num())
				if neg {
					v.Neg(v)
				}
				if v.Sign() >= 0 {
					add(v)
				}
			}
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].Cmp(cs[j]) < 0 })
		type seg struct {
			a, b *big.Int // b nil: no upper end
		}
		var segs []seg
		start := new(big.Int)
		for _, cp := range cs {
			if cp.Cmp(start) > 0 {
				segs = append(segs, seg{start, new(big.Int).Sub(cp, big1)})
			}
			segs = append(segs, seg{cp, cp})
			start = new(big.Int).Add(cp, big1)
		}
		segs = append(segs, seg{start, nil})
		for _, s := range segs {
			x := new(big.Rat).SetInt(s.a)
			xf := new(big.Rat).Add(x, half)
			if neg {
				x.Neg(x)
				xf.Neg(xf)
			}
			zeroOK := in(x) && !(neg && s.a.Sign() == 0)
			fracOK := in(xf)
			if !zeroOK && !fracOK {
				continue
			}
			ie := digitsRange(s.a, s.b)
			var suf *expr
			switch {
			case zeroOK && fracOK:
				suf = eOpt(eSeq(eLit("."), eRep(digits(), 1, -1)))
			case zeroOK:
				suf = eOpt(eSeq(eLit("."), eRep(eLit("0"), 1, -1)))
			default:
				suf = eSeq(eLit("."), eStar(digits()), eRange('1', '9'), eStar(digits()))
			}
			if neg {
				alts = append(alts, eSeq(eLit("-"), ie, suf))
			} else {
				alts = append(alts, eSeq(ie, suf))
			}
		}
	}
	return eAlt(alts...)
}

// digitsRange matches the canonical decimal spelling of the integers in
// [a, b], a ≥ 0 (b nil: no upper end).
func digitsRange(a, b *big.Int) *expr {
	as := a.String()
	var alts []*expr
	ten := big.NewInt(10)
	for n := len(as); ; n++ {
		lo := new(big.Int)
		if n > 1 {
			lo.Exp(ten, big.NewInt(int64(n-1)), nil)
		}
		if a.Cmp(lo) > 0 {
			lo.Set(a)
		}
		hiN := new(big.Int).Exp(ten, big.NewInt(int64(n)), nil)
		hiN.Sub(hiN, big1)
		if b == nil {
			alts = append(alts, sameLen(lo.String(), hiN.String()))
			alts = append(alts, eSeq(eRange('1', '9'), eRep(digits(), n, -1)))
			break
		}
		if hiN.Cmp(b) > 0 {
			hiN.Set(b)
		}
		if lo.Cmp(hiN) <= 0 {
			alts = append(alts, sameLen(lo.String(), hiN.String()))
		}
		if hiN.Cmp(b) >= 0 {
			break
		}
	}
	return eAlt(alts...)
}

func sameLen(lo, hi string) *expr {
	if len(lo) == 0 {
		return eEmpty
	}
	if lo == hi {
		return eLit(lo)
	}
	if lo[0] == hi[0] {
		return eSeq(eLit(lo[:1]), sameLen(lo[1:], hi[1:]))
	}
	rest := len(lo) - 1
	all0 := strings.Trim(lo[1:], "0") == ""
	all9 := strings.Trim(hi[1:], "9") == ""
	var alts []*expr
	s, e := lo[0], hi[0]
	if !all0 {
		alts = append(alts, eSeq(eLit(lo[:1]), sameLen(lo[1:], strings.Repeat("9", rest))))
		s++
	}
	if !all9 {
		alts = append(alts, eSeq(eLit(hi[:1]), sameLen(strings.Repeat("0", rest), hi[1:])))
		e--
	}
	if s <= e {
		alts = append(alts, eSeq(eRange(s, e), eRep(digits(), rest, rest)))
	}
	return eAlt(alts...)
}

// multipleOfExpr matches integers divisible by k: a remainder automaton.
func multipleOfExpr(k int64) *expr {
	g := &expr{op: opGraph, gn: int(k) + 1, gstart: int(k)}
	g.gfinal = []int{0}
	for d := 1; d <= 9; d++ {
		g.gedges = append(g.gedges, gedge{int(k), int(int64(d) % k), eByte(byte('0' + d))})
	}
	for r := int64(0); r < k; r++ {
		for d := int64(0); d <= 9; d++ {
			g.gedges = append(g.gedges, gedge{int(r), int((r*10 + d) % k), eByte(byte('0' + d))})
		}
	}
	return eAlt(eLit("0"), eSeq(eOpt(eLit("-")), g))
}
