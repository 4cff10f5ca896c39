package grammar

import (
	"math/big"
	"sort"
	"strconv"
	"strings"
)

type bound struct {
	set  bool
	v    *big.Rat
	excl bool
}

func (c *schemaCompiler) number(m map[string]any, path string, integer bool) (*expr, error) {
	var lo, hi bound
	rd := func(k string) (*big.Rat, bool, error) {
		v, ok := m[k]
		if !ok {
			return nil, false, nil
		}
		r, ok := toRat(v)
		if !ok {
			return nil, false, serr(path+"/"+k, k, "must be a number")
		}
		lim := new(big.Rat).SetInt64(1e15)
		if new(big.Rat).Abs(r).Cmp(lim) > 0 {
			return nil, false, serr(path+"/"+k, k, "bounds beyond ±1e15 are not supported")
		}
		return r, true, nil
	}
	for _, k := range []string{"minimum", "exclusiveMinimum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		if ok && (!lo.set || r.Cmp(lo.v) >= 0) {
			lo = bound{true, r, k == "exclusiveMinimum"}
		}
	}
	for _, k := range []string{"maximum", "exclusiveMaximum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		if ok && (!hi.set || r.Cmp(hi.v) <= 0) {
			hi = bound{true, r, k == "exclusiveMaximum"}
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

// intBounded matches integers within the bounds (non-integer bounds are
// rounded inward, which is exact for integers).
func intBounded(lo, hi bound) *expr {
	const inf = int64(1) << 62
	l, h := -inf, inf
	if lo.set {
		f := ratCeil(lo.v)
		if lo.excl && lo.v.IsInt() {
			f++
		}
		l = f
	}
	if hi.set {
		f := ratFloor(hi.v)
		if hi.excl && hi.v.IsInt() {
			f--
		}
		h = f
	}
	if l > h {
		return eNone
	}
	var alts []*expr
	if h >= 0 {
		a := l
		if a < 0 {
			a = 0
		}
		alts = append(alts, digitsRange(uint64(a), uint64(h), h == inf))
	}
	if l < 0 {
		a := h
		if a > -1 {
			a = -1
		}
		alts = append(alts, eSeq(eLit("-"), digitsRange(uint64(-a), uint64(-l), l == -inf)))
	}
	return eAlt(alts...)
}

func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	return q.Int64()
}

func ratCeil(r *big.Rat) int64 {
	f := ratFloor(r)
	if !r.IsInt() {
		f++
	}
	return f
}

// numBounded matches decimal numbers (no exponent) within the bounds.
// Bounds are rounded inward to integers: exact for integer bounds, a safe
// subset otherwise.
func numBounded(lo, hi bound) *expr {
	// Round non-integer bounds inward to inclusive integer bounds.
	if lo.set && !lo.v.IsInt() {
		lo = bound{true, new(big.Rat).SetInt64(ratCeil(lo.v)), false}
	}
	if hi.set && !hi.v.IsInt() {
		hi = bound{true, new(big.Rat).SetInt64(ratFloor(hi.v)), false}
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
		crit := map[int64]bool{}
		if neg {
			crit[0] = true // "-0" is excluded, so 0 is its own segment
		}
		for _, b := range []bound{lo, hi} {
			if b.set {
				v := b.v.Num().Int64()
				if neg {
					v = -v
				}
				if v >= 0 {
					crit[v] = true
				}
			}
		}
		var cs []int64
		for v := range crit {
			cs = append(cs, v)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
		type seg struct {
			a, b int64
			inf  bool
		}
		var segs []seg
		start := int64(0)
		for _, cp := range cs {
			if cp > start {
				segs = append(segs, seg{start, cp - 1, false})
			}
			segs = append(segs, seg{cp, cp, false})
			start = cp + 1
		}
		segs = append(segs, seg{start, 0, true})
		for _, s := range segs {
			x := new(big.Rat).SetInt64(s.a)
			xf := new(big.Rat).Add(x, half)
			if neg {
				x.Neg(x)
				xf.Neg(xf)
			}
			zeroOK := in(x) && !(neg && s.a == 0)
			fracOK := in(xf)
			if !zeroOK && !fracOK {
				continue
			}
			var ie *expr
			if s.inf {
				ie = digitsRange(uint64(s.a), 0, true)
			} else {
				ie = digitsRange(uint64(s.a), uint64(s.b), false)
			}
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

// digitsRange matches the canonical decimal spelling of integers in
// [a, b] (b ignored when inf: no upper end).
func digitsRange(a, b uint64, inf bool) *expr {
	as := strconv.FormatUint(a, 10)
	var alts []*expr
	for n := len(as); ; n++ {
		lo := uint64(0)
		if n > 1 {
			lo = pow10(n - 1)
		}
		if a > lo {
			lo = a
		}
		hiN := pow10(n) - 1
		if inf && n >= len(as) {
			alts = append(alts, sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hiN, 10)))
			alts = append(alts, eSeq(eRange('1', '9'), eRep(digits(), n, -1)))
			break
		}
		if hiN > b {
			hiN = b
		}
		if lo <= hiN {
			alts = append(alts, sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hiN, 10)))
		}
		if hiN >= b || n >= 19 {
			break
		}
	}
	return eAlt(alts...)
}

func pow10(n int) uint64 {
	r := uint64(1)
	for i := 0; i < n; i++ {
		r *= 10
	}
	return r
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
