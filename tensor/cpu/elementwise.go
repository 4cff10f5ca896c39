package cpu

import (
	"math"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Elementwise kernels work on runs: the output is always a fresh dense
// array, and the operands' broadcast strides are collapsed together so that
// the common model cases (same-shape dense, array with scalar, row
// broadcast) become a few long runs along one dim. A run is processed in
// blocks of ewBlock elements: 16-bit floats are widened into float32
// scratch, computed, and narrowed back with round-to-nearest-even, while
// dense float32 operands are used in place.

const (
	ewBlock = 512     // elements per scratch block (2 KiB of float32: stays in L1)
	ewGrain = 1 << 15 // elements per parallel chunk: enough to amortise a goroutine
)

// ewInteger lists the Go types integer arrays are stored as; bool is uint8 0/1.
type ewInteger interface {
	~uint8 | ~int32 | ~uint32 | ~int64
}

// ewView reinterprets storage bytes as elements of T.
func ewView[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// ewLayout is a shape walked by several operands at once; operand 0 is
// usually the dense output. Dims are collapsed where every operand allows.
type ewLayout struct {
	shape   []int
	strides [][]int
}

// inner is operand k's stride along the innermost (run) dim.
func (l ewLayout) inner(k int) int { return l.strides[k][len(l.shape)-1] }

// ewBroadcast returns the strides of a view (shape, strides) broadcast to
// shape to: missing leading dims and size-1 dims get stride 0.
func ewBroadcast(shape, strides, to []int) []int {
	out := make([]int, len(to))
	off := len(to) - len(shape)
	for i, d := range shape {
		if d != 1 {
			out[off+i] = strides[i]
		}
	}
	return out
}

// ewCollapse drops size-1 dims and merges neighbouring dims that every
// operand steps through uniformly, so dense data becomes one long dim.
func ewCollapse(shape []int, strides ...[]int) ewLayout {
	// built innermost first, reversed at the end
	var sh []int
	st := make([][]int, len(strides))
	for i := len(shape) - 1; i >= 0; i-- {
		d := shape[i]
		if d == 1 {
			continue
		}
		if n := len(sh); n > 0 {
			merge := true
			for k, s := range strides {
				if s[i] != st[k][n-1]*sh[n-1] {
					merge = false
					break
				}
			}
			if merge {
				sh[n-1] *= d
				continue
			}
		}
		sh = append(sh, d)
		for k, s := range strides {
			st[k] = append(st[k], s[i])
		}
	}
	if len(sh) == 0 {
		sh = []int{1}
		for k := range st {
			st[k] = []int{0}
		}
	}
	reverse := func(s []int) {
		for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
			s[i], s[j] = s[j], s[i]
		}
	}
	reverse(sh)
	for k := range st {
		reverse(st[k])
	}
	return ewLayout{shape: sh, strides: st}
}

// ewEach walks l in row-major order, split into parallel chunks of at
// least grain elements. mk is called once per chunk (so the body can own
// scratch); the body is called for each run of n elements along the
// innermost dim with pos[k] the element offset of operand k at the run's
// start. The body must not modify or keep pos.
func ewEach(l ewLayout, offs []int, grain int, mk func() func(pos []int, n int)) {
	nd := len(l.shape)
	inner := l.shape[nd-1]
	parallelFor(numel(l.shape), grain, func(lo, hi int) {
		body := mk()
		idx := make([]int, nd)
		pos := make([]int, len(offs))
		r := lo
		for d := nd - 1; d >= 0; d-- {
			idx[d] = r % l.shape[d]
			r /= l.shape[d]
		}
		for k := range pos {
			p := offs[k]
			for d := range nd {
				p += idx[d] * l.strides[k][d]
			}
			pos[k] = p
		}
		for cur := lo; cur < hi; {
			n := min(inner-idx[nd-1], hi-cur)
			body(pos, n)
			cur += n
			if cur >= hi {
				break
			}
			idx[nd-1] += n
			for k := range pos {
				pos[k] += n * l.strides[k][nd-1]
			}
			for d := nd - 1; d > 0 && idx[d] == l.shape[d]; d-- {
				idx[d] = 0
				idx[d-1]++
				for k := range pos {
					pos[k] += l.strides[k][d-1] - l.shape[d]*l.strides[k][d]
				}
			}
		}
	})
}

// ---- loads and stores ----

// ewLoadF32 returns n elements of a float array (dtype dt, storage data)
// starting at element off with stride st, as float32: the storage itself
// for dense float32, else widened into buf.
func ewLoadF32(dt tensor.DType, data []byte, off, st, n int, buf []float32) []float32 {
	buf = buf[:n]
	switch dt {
	case tensor.Float32:
		s := ewView[float32](data)
		if st == 1 {
			return s[off : off+n : off+n]
		}
		for i := range buf {
			buf[i] = s[off+i*st]
		}
	case tensor.BFloat16:
		s := ewView[uint16](data)
		if st == 1 && hasAVX512 && n >= 16 {
			cvtBF16ToF32(buf, s[off:off+n]) // the same bits, 16 at a time
		} else if st == 1 {
			for i, v := range s[off : off+n] {
				buf[i] = math.Float32frombits(uint32(v) << 16)
			}
		} else {
			for i := range buf {
				buf[i] = math.Float32frombits(uint32(s[off+i*st]) << 16)
			}
		}
	case tensor.Float16:
		s := ewView[uint16](data)
		if st == 1 {
			loadF16(buf, s[off:off+n])
			break
		}
		for i := range buf {
			buf[i] = tensor.F16ToF32(s[off+i*st])
		}
	default:
		// integers: exact for |v| < 2^24, rounded beyond
		x := ewLoadI64(dt, data, off, st, n, make([]int64, n))
		for i, v := range x {
			buf[i] = float32(v)
		}
	}
	return buf
}

// ewStoreF32 writes src to a float array at element off with stride st,
// rounding to nearest even for 16-bit types. Integer dtypes get C
// conversion (truncation toward zero, NaN to 0), bool gets v != 0.
func ewStoreF32(dt tensor.DType, data []byte, off, st int, src []float32) {
	switch dt {
	case tensor.Float32:
		d := ewView[float32](data)
		if st == 1 {
			copy(d[off:off+len(src)], src)
			return
		}
		for i, v := range src {
			d[off+i*st] = v
		}
	case tensor.BFloat16:
		d := ewView[uint16](data)
		if st == 1 {
			storeBF16(d[off:off+len(src)], src)
			return
		}
		for i, v := range src {
			d[off+i*st] = tensor.F32ToBF16(v)
		}
	case tensor.Float16:
		d := ewView[uint16](data)
		if st == 1 {
			storeF16(d[off:off+len(src)], src)
			return
		}
		for i, v := range src {
			d[off+i*st] = tensor.F32ToF16(v)
		}
	case tensor.Bool:
		d := ewView[uint8](data)
		for i, v := range src {
			d[off+i*st] = ewB2U(v != 0)
		}
	case tensor.Uint8:
		d := ewView[uint8](data)
		for i, v := range src {
			d[off+i*st] = uint8(ewF2I(v))
		}
	case tensor.Int32:
		d := ewView[int32](data)
		for i, v := range src {
			if v != v {
				v = 0
			}
			d[off+i*st] = int32(v)
		}
	case tensor.Uint32:
		d := ewView[uint32](data)
		for i, v := range src {
			d[off+i*st] = uint32(ewF2I(v))
		}
	case tensor.Int64:
		d := ewView[int64](data)
		for i, v := range src {
			d[off+i*st] = ewF2I(v)
		}
	}
}

// ewF2I truncates toward zero with NaN giving 0; unsigned targets wrap
// from the int64 value (so -1.0 becomes all ones, as on common C targets).
func ewF2I(v float32) int64 {
	if v != v {
		return 0
	}
	return int64(v)
}

func ewB2U(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func ewGather[T ewInteger](s []T, off, st int, buf []int64) {
	for i := range buf {
		buf[i] = int64(s[off+i*st])
	}
}

// ewLoadI64 returns n elements of an integer or bool array widened to int64
// (bool normalised to 0/1); dense int64 is returned in place.
func ewLoadI64(dt tensor.DType, data []byte, off, st, n int, buf []int64) []int64 {
	buf = buf[:n]
	switch dt {
	case tensor.Bool:
		s := ewView[uint8](data)
		for i := range buf {
			buf[i] = int64(ewB2U(s[off+i*st] != 0))
		}
	case tensor.Uint8:
		ewGather(ewView[uint8](data), off, st, buf)
	case tensor.Int32:
		ewGather(ewView[int32](data), off, st, buf)
	case tensor.Uint32:
		ewGather(ewView[uint32](data), off, st, buf)
	case tensor.Int64:
		s := ewView[int64](data)
		if st == 1 {
			return s[off : off+n : off+n]
		}
		ewGather(s, off, st, buf)
	default:
		f := ewLoadF32(dt, data, off, st, n, make([]float32, n))
		for i, v := range f {
			buf[i] = ewF2I(v)
		}
	}
	return buf
}

func ewScatter[T ewInteger](d []T, off, st int, src []int64) {
	for i, v := range src {
		d[off+i*st] = T(v)
	}
}

// ewStoreI64 writes int64 values to an array of dtype dt with C
// conversion: integers wrap, bool is v != 0, floats round to nearest.
func ewStoreI64(dt tensor.DType, data []byte, off, st int, src []int64) {
	switch dt {
	case tensor.Bool:
		d := ewView[uint8](data)
		for i, v := range src {
			d[off+i*st] = ewB2U(v != 0)
		}
	case tensor.Uint8:
		ewScatter(ewView[uint8](data), off, st, src)
	case tensor.Int32:
		ewScatter(ewView[int32](data), off, st, src)
	case tensor.Uint32:
		ewScatter(ewView[uint32](data), off, st, src)
	case tensor.Int64:
		ewScatter(ewView[int64](data), off, st, src)
	default:
		f := make([]float32, len(src))
		for i, v := range src {
			f[i] = float32(v)
		}
		ewStoreF32(dt, data, off, st, f)
	}
}

// ewLoadT returns n elements of T at off with stride st: the storage itself
// when dense, else gathered into buf.
func ewLoadT[T any](s []T, off, st, n int, buf []T) []T {
	if st == 1 {
		return s[off : off+n : off+n]
	}
	buf = buf[:n]
	for i := range buf {
		buf[i] = s[off+i*st]
	}
	return buf
}

// ---- float32 math ----

const (
	ewLog2e = 1.4426950408889634
	ewLn2   = 0.6931471805599453
)

// ewExpTable holds 2^(j/32), j = 0..31, for the exp range reduction.
var ewExpTable = func() (t [32]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 32)
	}
	return
}()

const ewShifter = 0x1.8p52 // adding it rounds a float64 of magnitude < 2^51 to an integer

// ewExp is e^x for float32, computed in float64 as 2^(n/32)·p(r) with
// |r| ≤ ln2/64 and a cubic p: within one ulp of the correctly rounded
// result (error about 6e-10 before the final rounding) and several times
// faster than math.Exp. Softmax and the activations use it.
func ewExp(x float32) float32 {
	if !(x < 88.8) || x < -104 { // overflow, underflow, ±Inf or NaN
		switch {
		case x != x:
			return x
		case x > 0:
			return float32(math.Inf(1))
		}
		return 0
	}
	xd := float64(x)
	nf := (xd*(32/ewLn2) + ewShifter) - ewShifter
	r := xd - nf*(ewLn2/32)
	p := 1 + r*(1+r*(0.5+r*(1.0/6)))
	n := int64(nf)
	return float32(p * ewExpTable[n&31] * math.Float64frombits(uint64((n>>5)+1023)<<52))
}

// ewExpInto sets o[i] = e^(x[i]-c), the loop body of ewExp inlined, and
// returns Σ o[i] in float64 (o and x the same slice or disjoint). With
// AVX-512 an assembly kernel does it, bit for bit the same (results and
// sum: exp_amd64.s).
func ewExpInto(o, x []float32, c float32) float64 {
	x = x[:len(o)]
	if ewExpVector && len(o) > 0 {
		return ewExpSumAVX512(&o[0], &x[0], len(o), c, &ewExpK)
	}
	var s0, s1 float64
	for i, v := range x {
		v -= c
		if !(v < 88.8) || v < -104 {
			o[i] = ewExp(v)
			s1 += float64(o[i])
			continue
		}
		xd := float64(v)
		nf := (xd*(32/ewLn2) + ewShifter) - ewShifter
		r := xd - nf*(ewLn2/32)
		p := 1 + r*(1+r*(0.5+r*(1.0/6)))
		n := int64(nf)
		e := float32(p * ewExpTable[n&31] * math.Float64frombits(uint64((n>>5)+1023)<<52))
		o[i] = e
		s0 += float64(e)
	}
	return s0 + s1
}

// ewExpOnly is ewExpInto without the sum.
func ewExpOnly(o, x []float32, c float32) {
	x = x[:len(o)]
	if ewExpVector && len(o) > 0 {
		ewExpAVX512(&o[0], &x[0], len(o), c, &ewExpK)
		return
	}
	ewExpInto(o, x, c)
}

// ewSigmoidInto sets o = sigmoid(x) (o may alias x): with e = e^-|x|, it is
// 1/(1+e) for x ≥ 0 and e/(1+e) below, never overflowing. With AVX-512
// an assembly kernel does it, bit for bit the same (exp_amd64.s).
func ewSigmoidInto(o, x []float32) {
	x = x[:len(o)]
	if ewExpVector && len(o) > 0 {
		ewSigmoidAVX512(&o[0], &x[0], len(o), &ewExpK)
		return
	}
	var nb [ewBlock]float32
	for len(o) > 0 {
		m := min(len(o), ewBlock)
		xs, e := x[:m], nb[:m]
		for i, v := range xs {
			e[i] = -float32(math.Abs(float64(v)))
		}
		ewExpInto(e, e, 0)
		for i, v := range xs {
			if v >= 0 {
				o[i] = 1 / (1 + e[i])
			} else {
				o[i] = e[i] / (1 + e[i])
			}
		}
		o, x = o[m:], x[m:]
	}
}

// ewPyRem is the float remainder with the divisor's sign (Python's %).
func ewPyRem(x, y float32) float32 {
	r := float32(math.Mod(float64(x), float64(y)))
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	if r == 0 {
		return float32(math.Copysign(0, float64(y)))
	}
	return r
}

// ---- Unary ----

// Unary applies op elementwise; floats compute in float32, integers in
// their own type (wrapping).
func (be *Backend) Unary(op tensor.UnaryOp, a *tensor.Array) *tensor.Array {
	dt := a.DType()
	odt := dt
	if op == tensor.OpLogicalNot || op == tensor.OpIsNaN || op == tensor.OpIsInf {
		odt = tensor.Bool
	}
	if !dt.IsFloat() {
		switch op {
		case tensor.OpIsNaN, tensor.OpIsInf:
			out, _ := be.newArray(a.Shape(), tensor.Bool)
			return out
		case tensor.OpNeg, tensor.OpAbs, tensor.OpSign, tensor.OpSquare, tensor.OpFloor,
			tensor.OpCeil, tensor.OpRound, tensor.OpLogicalNot:
		default:
			// float-only math on integers: compute in float32 and convert back
			f := be.AsType(a, tensor.Float32)
			defer f.Free()
			r := be.Unary(op, f)
			defer r.Free()
			return be.AsType(r, dt)
		}
	}
	out, om := be.newArray(a.Shape(), odt)
	if a.Size() == 0 {
		return out
	}
	ai := get(a)
	l := ewCollapse(a.Shape(), rowMajor(a.Shape()), ai.strides)
	sa := l.inner(1)
	ad, od := ai.buf.data, om.buf.data
	offs := []int{0, ai.off}
	if op == tensor.OpLogicalNot {
		ewEach(l, offs, ewGrain, func() func([]int, int) {
			if dt.IsFloat() {
				buf := make([]float32, ewBlock)
				return func(pos []int, n int) {
					o := ewView[uint8](od)
					for d := 0; d < n; d += ewBlock {
						x := ewLoadF32(dt, ad, pos[1]+d*sa, sa, min(ewBlock, n-d), buf)
						for i, v := range x {
							o[pos[0]+d+i] = ewB2U(v == 0)
						}
					}
				}
			}
			buf := make([]int64, ewBlock)
			return func(pos []int, n int) {
				o := ewView[uint8](od)
				for d := 0; d < n; d += ewBlock {
					x := ewLoadI64(dt, ad, pos[1]+d*sa, sa, min(ewBlock, n-d), buf)
					for i, v := range x {
						o[pos[0]+d+i] = ewB2U(v == 0)
					}
				}
			}
		})
		return out
	}
	switch dt {
	case tensor.Float32, tensor.BFloat16, tensor.Float16:
		ewEach(l, offs, ewGrain, func() func([]int, int) {
			xb := make([]float32, ewBlock)
			ob := make([]float32, ewBlock)
			return func(pos []int, n int) {
				for d := 0; d < n; d += ewBlock {
					m := min(ewBlock, n-d)
					x := ewLoadF32(dt, ad, pos[1]+d*sa, sa, m, xb)
					oo := pos[0] + d
					switch {
					case odt == tensor.Bool:
						ewUnaryBoolF32(op, ewView[uint8](od)[oo:oo+m], x)
					case dt == tensor.Float32:
						ewUnaryF32(op, ewView[float32](od)[oo:oo+m], x)
					default:
						ewUnaryF32(op, ob[:m], x)
						ewStoreF32(dt, od, oo, 1, ob[:m])
					}
				}
			}
		})
	case tensor.Bool, tensor.Uint8:
		ewUnaryIntArr[uint8](op, dt == tensor.Bool, l, offs, ad, od)
	case tensor.Int32:
		ewUnaryIntArr[int32](op, false, l, offs, ad, od)
	case tensor.Uint32:
		ewUnaryIntArr[uint32](op, false, l, offs, ad, od)
	case tensor.Int64:
		ewUnaryIntArr[int64](op, false, l, offs, ad, od)
	}
	return out
}

func ewUnaryIntArr[T ewInteger](op tensor.UnaryOp, isBool bool, l ewLayout, offs []int, ad, od []byte) {
	sa := l.inner(1)
	ewEach(l, offs, ewGrain, func() func([]int, int) {
		buf := make([]T, ewBlock)
		return func(pos []int, n int) {
			as, os := ewView[T](ad), ewView[T](od)
			for d := 0; d < n; d += ewBlock {
				m := min(ewBlock, n-d)
				x := ewLoadT(as, pos[1]+d*sa, sa, m, buf)
				o := os[pos[0]+d : pos[0]+d+m]
				if isBool { // every one of these ops maps 0/1 to itself
					for i, v := range x {
						o[i] = T(ewB2U(v != 0))
					}
					continue
				}
				ewUnaryInt(op, o, x)
			}
		}
	})
}

func ewUnaryInt[T ewInteger](op tensor.UnaryOp, o, x []T) {
	x = x[:len(o)]
	switch op {
	case tensor.OpNeg:
		for i, v := range x {
			o[i] = -v
		}
	case tensor.OpAbs:
		for i, v := range x {
			if v < 0 {
				v = -v
			}
			o[i] = v
		}
	case tensor.OpSign:
		for i, v := range x {
			switch {
			case v > 0:
				o[i] = 1
			case v < 0:
				o[i] = -T(1) // signed types only: unsigned values are never < 0
			default:
				o[i] = 0
			}
		}
	case tensor.OpSquare:
		for i, v := range x {
			o[i] = v * v
		}
	default: // Floor, Ceil, Round: integers are already whole
		copy(o, x)
	}
}

func ewUnaryBoolF32(op tensor.UnaryOp, o []uint8, x []float32) {
	x = x[:len(o)]
	for i, v := range x {
		if op == tensor.OpIsNaN {
			o[i] = ewB2U(v != v)
		} else {
			o[i] = ewB2U(math.IsInf(float64(v), 0))
		}
	}
}

// ewUnaryF32 computes o = op(x); o and x may be the same slice.
func ewUnaryF32(op tensor.UnaryOp, o, x []float32) {
	x = x[:len(o)]
	switch op {
	case tensor.OpNeg:
		for i, v := range x {
			o[i] = -v
		}
	case tensor.OpAbs:
		for i, v := range x {
			o[i] = math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
		}
	case tensor.OpSign:
		for i, v := range x {
			switch {
			case v > 0:
				o[i] = 1
			case v < 0:
				o[i] = -1
			default:
				o[i] = v // ±0 and NaN
			}
		}
	case tensor.OpSquare:
		for i, v := range x {
			o[i] = v * v
		}
	case tensor.OpSqrt:
		for i, v := range x {
			o[i] = float32(math.Sqrt(float64(v)))
		}
	case tensor.OpRsqrt:
		for i, v := range x {
			o[i] = float32(1 / math.Sqrt(float64(v)))
		}
	case tensor.OpReciprocal:
		for i, v := range x {
			o[i] = 1 / v
		}
	case tensor.OpExp:
		ewExpInto(o, x, 0)
	case tensor.OpLog:
		for i, v := range x {
			o[i] = float32(math.Log(float64(v)))
		}
	case tensor.OpLog1p:
		for i, v := range x {
			o[i] = float32(math.Log1p(float64(v)))
		}
	case tensor.OpSin:
		for i, v := range x {
			o[i] = float32(math.Sin(float64(v)))
		}
	case tensor.OpCos:
		for i, v := range x {
			o[i] = float32(math.Cos(float64(v)))
		}
	case tensor.OpTanh:
		for i, v := range x {
			o[i] = float32(math.Tanh(float64(v)))
		}
	case tensor.OpSigmoid:
		ewSigmoidInto(o, x)
	case tensor.OpSoftplus:
		for i, v := range x {
			// max(x, 0) + log1p(e^-|x|): no overflow for large x, no loss for small
			ax := math.Abs(float64(v))
			o[i] = float32(math.Max(float64(v), 0) + math.Log1p(float64(ewExp(float32(-ax)))))
			if v != v {
				o[i] = v
			}
		}
	case tensor.OpErf:
		for i, v := range x {
			o[i] = float32(math.Erf(float64(v)))
		}
	case tensor.OpGelu:
		for i, v := range x {
			xd := float64(v)
			o[i] = float32(xd / 2 * (1 + math.Erf(xd/math.Sqrt2)))
		}
	case tensor.OpGeluTanh:
		const c = 0.7978845608028654 // √(2/π)
		for i, v := range x {
			xd := float64(v)
			o[i] = float32(0.5 * xd * (1 + math.Tanh(c*(xd+0.044715*xd*xd*xd))))
		}
	case tensor.OpSilu:
		var sb [ewBlock]float32
		for len(o) > 0 {
			m := min(len(o), ewBlock)
			sg := sb[:m]
			ewSigmoidInto(sg, x[:m])
			ewBinaryF32(tensor.OpMul, o[:m], x[:m], sg)
			o, x = o[m:], x[m:]
		}
	case tensor.OpFloor:
		for i, v := range x {
			o[i] = float32(math.Floor(float64(v)))
		}
	case tensor.OpCeil:
		for i, v := range x {
			o[i] = float32(math.Ceil(float64(v)))
		}
	case tensor.OpRound:
		for i, v := range x {
			o[i] = rint(v)
		}
	default:
		panic(&tensor.Error{Op: "Unary", Err: tensor.ErrArgument})
	}
}

// ---- Binary ----

// Binary applies op with NumPy broadcasting to shape. Dense, scalar and
// row-broadcast operands run as tight loops over contiguous memory; any
// other view (transposed, sliced, broadcast) is walked by its strides.
func (be *Backend) Binary(op tensor.BinaryOp, a, b *tensor.Array, shape []int) *tensor.Array {
	dt := a.DType()
	odt := dt
	if op.IsComparison() {
		odt = tensor.Bool
	}
	if dt.IsFloat() && op >= tensor.OpBitwiseAnd {
		panic(&tensor.Error{Op: "Binary", Err: tensor.ErrDType})
	}
	out, om := be.newArray(shape, odt)
	if numel(shape) == 0 {
		return out
	}
	ai, bi := get(a), get(b)
	l := ewCollapse(shape, rowMajor(shape),
		ewBroadcast(a.Shape(), ai.strides, shape), ewBroadcast(b.Shape(), bi.strides, shape))
	offs := []int{0, ai.off, bi.off}
	ad, bd, od := ai.buf.data, bi.buf.data, om.buf.data
	switch dt {
	case tensor.Float32, tensor.BFloat16, tensor.Float16:
		ewBinaryFloat(op, dt, odt, l, offs, ad, bd, od)
	case tensor.Bool, tensor.Uint8:
		ewBinaryIntArr[uint8](op, dt == tensor.Bool, l, offs, ad, bd, od)
	case tensor.Int32:
		ewBinaryIntArr[int32](op, false, l, offs, ad, bd, od)
	case tensor.Uint32:
		ewBinaryIntArr[uint32](op, false, l, offs, ad, bd, od)
	case tensor.Int64:
		ewBinaryIntArr[int64](op, false, l, offs, ad, bd, od)
	}
	return out
}

// ewBcastCache fills a scratch block with one broadcast (stride 0) value
// and remembers it, so a scalar operand is expanded once, not per block.
type ewBcastCache[T any] struct {
	buf []T
	off int
	n   int
}

func (c *ewBcastCache[T]) get(s []T, off, n int) []T {
	if c.off != off || c.n < n {
		v := s[off]
		for i := range c.buf[:n] {
			c.buf[i] = v
		}
		c.off, c.n = off, n
	}
	return c.buf[:n]
}

func ewBinaryFloat(op tensor.BinaryOp, dt, odt tensor.DType, l ewLayout, offs []int, ad, bd, od []byte) {
	sa, sb := l.inner(1), l.inner(2)
	// bfloat16 add/sub/mul of dense runs (or a run with a scalar) skip the scratch blocks
	fastBF16 := dt == tensor.BFloat16 && (op == tensor.OpAdd || op == tensor.OpSub || op == tensor.OpMul) &&
		(sa == 1 && (sb == 1 || sb == 0) || sa == 0 && sb == 1)
	ewEach(l, offs, ewGrain, func() func([]int, int) {
		var xb, yb, ob []float32
		var xc, yc ewBcastCache[float32]
		if !fastBF16 { // the fast path needs no scratch: skip five blocks per worker per call
			xb = make([]float32, ewBlock)
			yb = make([]float32, ewBlock)
			ob = make([]float32, ewBlock)
			xc = ewBcastCache[float32]{buf: make([]float32, ewBlock), off: -1}
			yc = ewBcastCache[float32]{buf: make([]float32, ewBlock), off: -1}
		}
		load := func(data []byte, off, st, m int, buf []float32, c *ewBcastCache[float32]) []float32 {
			if st == 0 && dt == tensor.Float32 {
				return c.get(ewView[float32](data), off, m)
			}
			if st == 0 { // widen the one value, then broadcast it
				if c.off != off || c.n < m {
					v := ewLoadF32(dt, data, off, 1, 1, buf)[0]
					for i := range c.buf[:m] {
						c.buf[i] = v
					}
					c.off, c.n = off, m
				}
				return c.buf[:m]
			}
			return ewLoadF32(dt, data, off, st, m, buf)
		}
		return func(pos []int, n int) {
			if fastBF16 {
				o := ewView[uint16](od)[pos[0] : pos[0]+n]
				xs, ys := ewView[uint16](ad), ewView[uint16](bd)
				ewBinaryBF16(op, o, xs[pos[1]:pos[1]+max(1, n*sa)], ys[pos[2]:pos[2]+max(1, n*sb)])
				return
			}
			for d := 0; d < n; d += ewBlock {
				m := min(ewBlock, n-d)
				x := load(ad, pos[1]+d*sa, sa, m, xb, &xc)
				y := load(bd, pos[2]+d*sb, sb, m, yb, &yc)
				oo := pos[0] + d
				switch {
				case odt == tensor.Bool:
					ewCompare(op, ewView[uint8](od)[oo:oo+m], x, y)
				case dt == tensor.Float32:
					ewBinaryF32(op, ewView[float32](od)[oo:oo+m], x, y)
				default:
					ewBinaryF32(op, ob[:m], x, y)
					ewStoreF32(dt, od, oo, 1, ob[:m])
				}
			}
		}
	})
}

// ewBinaryBF16 computes o = x op y for bfloat16 Add, Sub and Mul straight
// from and to the 16-bit storage; x or y of length 1 is a scalar operand.
// With AVX-512 the assembly kernel does 16 at a time (a scalar operand
// from a block of copies), the same bits as the loop.
func ewBinaryBF16(op tensor.BinaryOp, o, x, y []uint16) {
	n := len(o)
	if hasAVX512 && n >= 16 {
		code := ewOpCode(op)
		m := n &^ 15
		// a scalar operand is read from a block of its copies
		var rep [512]uint16
		step := m
		if len(x) != n || len(y) != n {
			scalar := y[0]
			if len(x) != n {
				scalar = x[0]
			}
			for i := range rep {
				rep[i] = scalar
			}
			step = len(rep)
		}
		for d := 0; d < m; d += step {
			c := min(step, m-d)
			xp, yp := &rep[0], &rep[0]
			if len(x) == n {
				xp = &x[d]
			}
			if len(y) == n {
				yp = &y[d]
			}
			ewBinBF16(code, &o[d], xp, yp, c)
		}
		if m == n {
			return
		}
		o = o[m:]
		if len(x) == n {
			x = x[m:]
		}
		if len(y) == n {
			y = y[m:]
		}
	}
	ewBinaryBF16Loop(op, o, x, y)
}

// ewOpCode is the assembly kernels' number for an arithmetic op.
func ewOpCode(op tensor.BinaryOp) int {
	switch op {
	case tensor.OpAdd:
		return 0
	case tensor.OpSub:
		return 1
	case tensor.OpMul:
		return 2
	}
	return 3 // OpDiv
}

// ewBinaryBF16Loop is ewBinaryBF16 one element at a time.
func ewBinaryBF16Loop(op tensor.BinaryOp, o, x, y []uint16) {
	w := func(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
	n := len(o)
	switch {
	case len(x) == n && len(y) == n:
		x, y = x[:n], y[:n]
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) + w(y[i]))
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) - w(y[i]))
			}
		default:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) * w(y[i]))
			}
		}
	case len(y) == 1 && len(x) == n:
		x, c := x[:n], w(y[0])
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) + c)
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) - c)
			}
		default:
			for i := range o {
				o[i] = tensor.F32ToBF16(w(x[i]) * c)
			}
		}
	default: // scalar first
		y, c := y[:n], w(x[0])
		switch op {
		case tensor.OpAdd:
			for i := range o {
				o[i] = tensor.F32ToBF16(c + w(y[i]))
			}
		case tensor.OpSub:
			for i := range o {
				o[i] = tensor.F32ToBF16(c - w(y[i]))
			}
		default:
			for i := range o {
				o[i] = tensor.F32ToBF16(c * w(y[i]))
			}
		}
	}
}

// ewBinaryF32 computes o = x op y for arithmetic ops.
func ewBinaryF32(op tensor.BinaryOp, o, x, y []float32) {
	x, y = x[:len(o)], y[:len(o)]
	if hasAVX512 && len(o) >= 16 && (op == tensor.OpAdd || op == tensor.OpSub || op == tensor.OpMul || op == tensor.OpDiv) {
		m := len(o) &^ 15 // 16 at a time, the same IEEE results
		ewBinF32(ewOpCode(op), &o[0], &x[0], &y[0], m)
		if m == len(o) {
			return
		}
		o, x, y = o[m:], x[m:], y[m:]
	}
	switch op {
	case tensor.OpAdd:
		for i := range o {
			o[i] = x[i] + y[i]
		}
	case tensor.OpSub:
		for i := range o {
			o[i] = x[i] - y[i]
		}
	case tensor.OpMul:
		for i := range o {
			o[i] = x[i] * y[i]
		}
	case tensor.OpDiv:
		for i := range o {
			o[i] = x[i] / y[i]
		}
	case tensor.OpPow:
		for i := range o {
			o[i] = float32(math.Pow(float64(x[i]), float64(y[i])))
		}
	case tensor.OpMaximum:
		for i := range o {
			u, v := x[i], y[i]
			if u > v || u != u {
				o[i] = u
			} else {
				o[i] = v
			}
		}
	case tensor.OpMinimum:
		for i := range o {
			u, v := x[i], y[i]
			if u < v || u != u {
				o[i] = u
			} else {
				o[i] = v
			}
		}
	case tensor.OpRemainder:
		for i := range o {
			o[i] = ewPyRem(x[i], y[i])
		}
	case tensor.OpFloorDivide:
		for i := range o {
			o[i] = float32(math.Floor(float64(x[i] / y[i])))
		}
	default:
		panic(&tensor.Error{Op: "Binary", Err: tensor.ErrArgument})
	}
}

func ewBinaryIntArr[T ewInteger](op tensor.BinaryOp, isBool bool, l ewLayout, offs []int, ad, bd, od []byte) {
	sa, sb := l.inner(1), l.inner(2)
	cmp := op.IsComparison()
	ewEach(l, offs, ewGrain, func() func([]int, int) {
		xb := make([]T, ewBlock)
		yb := make([]T, ewBlock)
		xc := ewBcastCache[T]{buf: make([]T, ewBlock), off: -1}
		yc := ewBcastCache[T]{buf: make([]T, ewBlock), off: -1}
		return func(pos []int, n int) {
			as, bs := ewView[T](ad), ewView[T](bd)
			for d := 0; d < n; d += ewBlock {
				m := min(ewBlock, n-d)
				var x, y []T
				if sa == 0 {
					x = xc.get(as, pos[1], m)
				} else {
					x = ewLoadT(as, pos[1]+d*sa, sa, m, xb)
				}
				if sb == 0 {
					y = yc.get(bs, pos[2], m)
				} else {
					y = ewLoadT(bs, pos[2]+d*sb, sb, m, yb)
				}
				oo := pos[0] + d
				if cmp {
					ewCompare(op, ewView[uint8](od)[oo:oo+m], x, y)
					continue
				}
				o := ewView[T](od)[oo : oo+m]
				ewBinaryInt(op, o, x, y)
				if isBool {
					for i, v := range o {
						o[i] = T(ewB2U(v != 0))
					}
				}
			}
		}
	})
}

// ewBinaryInt computes o = x op y in T's wrapping arithmetic; division by
// zero gives 0 instead of a fault.
func ewBinaryInt[T ewInteger](op tensor.BinaryOp, o, x, y []T) {
	x, y = x[:len(o)], y[:len(o)]
	switch op {
	case tensor.OpAdd:
		for i := range o {
			o[i] = x[i] + y[i]
		}
	case tensor.OpSub:
		for i := range o {
			o[i] = x[i] - y[i]
		}
	case tensor.OpMul:
		for i := range o {
			o[i] = x[i] * y[i]
		}
	case tensor.OpDiv:
		for i := range o {
			if y[i] == 0 {
				o[i] = 0
			} else {
				o[i] = x[i] / y[i]
			}
		}
	case tensor.OpPow:
		for i := range o {
			o[i] = ewIntPow(x[i], y[i])
		}
	case tensor.OpMaximum:
		for i := range o {
			o[i] = max(x[i], y[i])
		}
	case tensor.OpMinimum:
		for i := range o {
			o[i] = min(x[i], y[i])
		}
	case tensor.OpRemainder:
		for i := range o {
			u, v := x[i], y[i]
			if v == 0 {
				o[i] = 0
				continue
			}
			r := u % v
			if r != 0 && (r < 0) != (v < 0) {
				r += v
			}
			o[i] = r
		}
	case tensor.OpFloorDivide:
		for i := range o {
			u, v := x[i], y[i]
			if v == 0 {
				o[i] = 0
				continue
			}
			q := u / v
			if (u%v != 0) && ((u < 0) != (v < 0)) {
				q--
			}
			o[i] = q
		}
	case tensor.OpBitwiseAnd:
		for i := range o {
			o[i] = x[i] & y[i]
		}
	case tensor.OpBitwiseOr:
		for i := range o {
			o[i] = x[i] | y[i]
		}
	case tensor.OpBitwiseXor:
		for i := range o {
			o[i] = x[i] ^ y[i]
		}
	case tensor.OpLeftShift:
		for i := range o {
			o[i] = x[i] << uint64(y[i]) // a negative count is huge: result 0
		}
	case tensor.OpRightShift:
		for i := range o {
			o[i] = x[i] >> uint64(y[i])
		}
	}
}

// ewIntPow is x^y by squaring; negative exponents give the integer part of
// the true power (1 for x == 1, ±1 for x == -1, else 0).
func ewIntPow[T ewInteger](x, y T) T {
	if y < 0 {
		switch {
		case x == 1:
			return 1
		case x == -T(1): // -1 (signed types only)
			if y&1 != 0 {
				return x
			}
			return 1
		}
		return 0
	}
	r := T(1)
	for y > 0 {
		if y&1 != 0 {
			r *= x
		}
		x *= x
		y >>= 1
	}
	return r
}

// ewCompare computes the bool result of comparison and logical ops, for
// float32 (16-bit floats arrive widened) and every integer dtype.
func ewCompare[T ewInteger | ~float32](op tensor.BinaryOp, o []uint8, x, y []T) {
	x, y = x[:len(o)], y[:len(o)]
	switch op {
	case tensor.OpEqual:
		for i := range o {
			o[i] = ewB2U(x[i] == y[i])
		}
	case tensor.OpNotEqual:
		for i := range o {
			o[i] = ewB2U(x[i] != y[i])
		}
	case tensor.OpLess:
		for i := range o {
			o[i] = ewB2U(x[i] < y[i])
		}
	case tensor.OpLessEqual:
		for i := range o {
			o[i] = ewB2U(x[i] <= y[i])
		}
	case tensor.OpGreater:
		for i := range o {
			o[i] = ewB2U(x[i] > y[i])
		}
	case tensor.OpGreaterEqual:
		for i := range o {
			o[i] = ewB2U(x[i] >= y[i])
		}
	case tensor.OpLogicalAnd:
		for i := range o {
			o[i] = ewB2U(x[i] != 0 && y[i] != 0)
		}
	case tensor.OpLogicalOr:
		for i := range o {
			o[i] = ewB2U(x[i] != 0 || y[i] != 0)
		}
	}
}

// ---- Where ----

// Where picks a where cond is true, else b. It only moves elements, so it
// works on element sizes rather than dtypes.
func (be *Backend) Where(cond, a, b *tensor.Array, shape []int) *tensor.Array {
	dt := a.DType()
	out, om := be.newArray(shape, dt)
	if numel(shape) == 0 {
		return out
	}
	ci, ai, bi := get(cond), get(a), get(b)
	l := ewCollapse(shape, rowMajor(shape), ewBroadcast(cond.Shape(), ci.strides, shape),
		ewBroadcast(a.Shape(), ai.strides, shape), ewBroadcast(b.Shape(), bi.strides, shape))
	offs := []int{0, ci.off, ai.off, bi.off}
	cd, ad, bd, od := ci.buf.data, ai.buf.data, bi.buf.data, om.buf.data
	switch dt.Size() {
	case 1:
		ewWhere[uint8](l, offs, cd, ad, bd, od)
	case 2:
		ewWhere[uint16](l, offs, cd, ad, bd, od)
	case 4:
		ewWhere[uint32](l, offs, cd, ad, bd, od)
	default:
		ewWhere[uint64](l, offs, cd, ad, bd, od)
	}
	return out
}

func ewWhere[T uint8 | uint16 | uint32 | uint64](l ewLayout, offs []int, cd, ad, bd, od []byte) {
	sc, sa, sb := l.inner(1), l.inner(2), l.inner(3)
	ewEach(l, offs, ewGrain, func() func([]int, int) {
		return func(pos []int, n int) {
			c, x, y := ewView[uint8](cd), ewView[T](ad), ewView[T](bd)
			o := ewView[T](od)[pos[0] : pos[0]+n]
			pc, pa, pb := pos[1], pos[2], pos[3]
			if sc == 1 && sa == 1 && sb == 1 {
				c, x, y = c[pc:pc+n], x[pa:pa+n], y[pb:pb+n]
				for i := range o {
					if c[i] != 0 {
						o[i] = x[i]
					} else {
						o[i] = y[i]
					}
				}
				return
			}
			for i := range o {
				if c[pc+i*sc] != 0 {
					o[i] = x[pa+i*sa]
				} else {
					o[i] = y[pb+i*sb]
				}
			}
		}
	})
}
