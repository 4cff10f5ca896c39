package cpu

import (
	"math"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// ---- rows along one axis ----

// ewRows describes the 1-D rows of an array along one axis: for each row,
// operand 0 of l gives its start in a dense output of the same shape and
// operand 1 its start in the input. Along the row the input steps by
// inStride and the output by outStride.
type ewRows struct {
	l         ewLayout
	offs      []int
	n         int
	inStride  int
	outStride int
}

func ewRowsOf(a *tensor.Array, axis int) ewRows {
	shp := a.Shape()
	im := get(a)
	dense := rowMajor(shp)
	var kept, keptOut, keptIn []int
	for i, d := range shp {
		if i != axis {
			kept = append(kept, d)
			keptOut = append(keptOut, dense[i])
			keptIn = append(keptIn, im.strides[i])
		}
	}
	return ewRows{
		l:    ewCollapse(kept, keptOut, keptIn),
		offs: []int{0, im.off}, n: shp[axis],
		inStride: im.strides[axis], outStride: dense[axis],
	}
}

// count is the number of rows.
func (r ewRows) count() int { return numel(r.l.shape) }

// each calls the body made by mk (once per parallel chunk) with the
// output and input start of every row.
func (r ewRows) each(mk func() func(outOff, inOff int)) {
	r.eachGrain(max(1, (1<<14)/max(r.n, 1)), mk)
}

// eachGrain is each with at least grain rows per parallel chunk.
func (r ewRows) eachGrain(grain int, mk func() func(outOff, inOff int)) {
	so, si := r.l.inner(0), r.l.inner(1)
	ewEach(r.l, r.offs, grain, func() func([]int, int) {
		body := mk()
		return func(pos []int, n int) {
			for j := range n {
				body(pos[0]+j*so, pos[1]+j*si)
			}
		}
	})
}

// ---- Reduce ----

func reduceOutDType(op tensor.ReduceOp, dt tensor.DType) tensor.DType {
	switch op {
	case tensor.ReduceSum, tensor.ReduceProd:
		switch dt {
		case tensor.Bool:
			return tensor.Int32
		case tensor.Uint8:
			return tensor.Uint32
		}
	case tensor.ReduceMean:
		if !dt.IsFloat() {
			return tensor.Float32
		}
	case tensor.ReduceAny, tensor.ReduceAll:
		return tensor.Bool
	}
	return dt
}

// ewFloatAcc accumulates one float reduction. Sums and products run in
// float64, so long rows stay accurate without pairwise summation.
type ewFloatAcc struct {
	op       tensor.ReduceOp
	sum      float64 // Sum, Mean, Prod; LogSumExp: Σ e^(x-m)
	m        float32 // Max, Min; LogSumExp: running max
	flag     bool    // Any, All
	nan      bool    // LogSumExp saw a NaN
	count    int
	finished bool
}

func newFloatAcc(op tensor.ReduceOp) ewFloatAcc {
	a := ewFloatAcc{op: op}
	switch op {
	case tensor.ReduceProd:
		a.sum = 1
	case tensor.ReduceMax, tensor.ReduceLogSumExp:
		a.m = float32(math.Inf(-1))
	case tensor.ReduceMin:
		a.m = float32(math.Inf(1))
	case tensor.ReduceAll:
		a.flag = true
	}
	return a
}

func ewSumF64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// ewMaxF32 is the maximum of m and x, NaN if any element is NaN: the
// first NaN of x, or m when it is NaN and x has none; among equal values
// the earliest (which decides only the sign of a zero). Long rows take
// ewMaxAVX512 for their whole vectors, which gives those bits whenever
// the vectors hold no NaN and their maximum is not zero (non-zero floats
// that compare equal are the same bits); otherwise the loop below runs.
func ewMaxF32(m float32, x []float32) float32 {
	if hasAVX512 && len(x) >= 64 {
		n := len(x) &^ 15
		if v, clean := ewMaxAVX512(&x[0], n); clean && v != 0 {
			if v > m {
				m = v
			}
			return ewMaxF32Loop(m, x[n:])
		}
	}
	return ewMaxF32Loop(m, x)
}

// ewMaxF32Loop is ewMaxF32 element by element.
func ewMaxF32Loop(m float32, x []float32) float32 {
	for _, v := range x {
		if v > m || v != v {
			m = v
			if v != v {
				return v
			}
		}
	}
	return m
}

func ewMinF32(m float32, x []float32) float32 {
	for _, v := range x {
		if v < m || v != v {
			m = v
			if v != v {
				return v
			}
		}
	}
	return m
}

// ewExpSum returns Σ e^(x-m) in float64, writing the terms to y when y is
// not nil.
func ewExpSum(x, y []float32, m float32) float64 {
	if y != nil {
		return ewExpInto(y[:len(x)], x, m)
	}
	var buf [ewBlock]float32
	s := 0.0
	for len(x) > 0 {
		k := min(len(x), ewBlock)
		s += ewExpInto(buf[:k], x[:k], m)
		x = x[k:]
	}
	return s
}

func (a *ewFloatAcc) add(x []float32) {
	a.count += len(x)
	switch a.op {
	case tensor.ReduceSum, tensor.ReduceMean:
		a.sum += ewSumF64(x)
	case tensor.ReduceProd:
		for _, v := range x {
			a.sum *= float64(v)
		}
	case tensor.ReduceMax:
		a.m = ewMaxF32(a.m, x)
	case tensor.ReduceMin:
		a.m = ewMinF32(a.m, x)
	case tensor.ReduceAny:
		if !a.flag {
			for _, v := range x {
				if v != 0 {
					a.flag = true
					break
				}
			}
		}
	case tensor.ReduceAll:
		if a.flag {
			for _, v := range x {
				if v == 0 {
					a.flag = false
					break
				}
			}
		}
	case tensor.ReduceLogSumExp:
		bm := ewMaxF32(float32(math.Inf(-1)), x)
		a.lseMerge(bm, 0, x)
	}
}

// lseMerge folds a block with max bm (and either its terms x, or its
// already-shifted sum s) into the running (m, sum) pair.
func (a *ewFloatAcc) lseMerge(bm float32, s float64, x []float32) {
	switch {
	case bm != bm:
		a.nan = true
		return
	case math.IsInf(float64(bm), -1):
		return // contributes e^-inf = 0
	case math.IsInf(float64(bm), 1) || math.IsInf(float64(a.m), 1):
		a.m = float32(math.Inf(1))
		return
	}
	if bm > a.m {
		a.sum *= math.Exp(float64(a.m - bm))
		a.m = bm
	}
	if x != nil {
		a.sum += ewExpSum(x, nil, a.m)
	} else {
		a.sum += s * math.Exp(float64(bm-a.m))
	}
}

func (a *ewFloatAcc) merge(b *ewFloatAcc) {
	a.count += b.count
	switch a.op {
	case tensor.ReduceSum, tensor.ReduceMean:
		a.sum += b.sum
	case tensor.ReduceProd:
		a.sum *= b.sum
	case tensor.ReduceMax:
		a.m = ewMaxF32(a.m, []float32{b.m})
	case tensor.ReduceMin:
		a.m = ewMinF32(a.m, []float32{b.m})
	case tensor.ReduceAny:
		a.flag = a.flag || b.flag
	case tensor.ReduceAll:
		a.flag = a.flag && b.flag
	case tensor.ReduceLogSumExp:
		if b.nan {
			a.nan = true
		}
		a.lseMerge(b.m, b.sum, nil)
	}
}

// result is the reduction's value (Any/All as 0/1).
func (a *ewFloatAcc) result() float32 {
	switch a.op {
	case tensor.ReduceSum, tensor.ReduceProd:
		return float32(a.sum)
	case tensor.ReduceMean:
		return float32(a.sum / float64(a.count))
	case tensor.ReduceMax, tensor.ReduceMin:
		return a.m
	case tensor.ReduceAny, tensor.ReduceAll:
		if a.flag {
			return 1
		}
		return 0
	}
	// LogSumExp
	switch {
	case a.nan:
		return float32(math.NaN())
	case math.IsInf(float64(a.m), 0):
		return a.m // all -inf (or empty) gives -inf; any +inf gives +inf
	}
	return float32(float64(a.m) + math.Log(a.sum))
}

// ewIntAcc accumulates one integer (or bool) reduction in int64, which
// wraps exactly like the narrower output types when truncated.
type ewIntAcc struct {
	op    tensor.ReduceOp
	v     int64
	f     float64 // Mean
	flag  bool
	count int
}

func newIntAcc(op tensor.ReduceOp) ewIntAcc {
	a := ewIntAcc{op: op}
	switch op {
	case tensor.ReduceProd:
		a.v = 1
	case tensor.ReduceMax:
		a.v = math.MinInt64
	case tensor.ReduceMin:
		a.v = math.MaxInt64
	case tensor.ReduceAll:
		a.flag = true
	}
	return a
}

func (a *ewIntAcc) add(x []int64) {
	a.count += len(x)
	switch a.op {
	case tensor.ReduceSum:
		for _, v := range x {
			a.v += v
		}
	case tensor.ReduceMean:
		for _, v := range x {
			a.f += float64(v)
		}
	case tensor.ReduceProd:
		for _, v := range x {
			a.v *= v
		}
	case tensor.ReduceMax:
		for _, v := range x {
			a.v = max(a.v, v)
		}
	case tensor.ReduceMin:
		for _, v := range x {
			a.v = min(a.v, v)
		}
	case tensor.ReduceAny:
		for _, v := range x {
			a.flag = a.flag || v != 0
		}
	case tensor.ReduceAll:
		for _, v := range x {
			a.flag = a.flag && v != 0
		}
	}
}

func (a *ewIntAcc) merge(b *ewIntAcc) {
	a.count += b.count
	switch a.op {
	case tensor.ReduceSum:
		a.v += b.v
	case tensor.ReduceMean:
		a.f += b.f
	case tensor.ReduceProd:
		a.v *= b.v
	case tensor.ReduceMax:
		a.v = max(a.v, b.v)
	case tensor.ReduceMin:
		a.v = min(a.v, b.v)
	case tensor.ReduceAny:
		a.flag = a.flag || b.flag
	case tensor.ReduceAll:
		a.flag = a.flag && b.flag
	}
}

// ewIntRange gives the smallest and largest value of an integer dtype, the
// identities of Max and Min over nothing.
func ewIntRange(dt tensor.DType) (lo, hi int64) {
	switch dt {
	case tensor.Bool:
		return 0, 1
	case tensor.Uint8:
		return 0, math.MaxUint8
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32
	case tensor.Uint32:
		return 0, math.MaxUint32
	}
	return math.MinInt64, math.MaxInt64
}

// ewReducer reduces runs of one array into accumulators, reading blocks
// through per-worker scratch.
type ewReducer struct {
	op     tensor.ReduceOp
	dt     tensor.DType
	data   []byte
	stride int
	fb     []float32
	ib     []int64
}

// redChunk is the length of the fixed pieces a long row is reduced in:
// each piece on its own, then the pieces merged in order. A row's result
// is then the same whether it is reduced whole or split across workers,
// and whatever the number of rows or workers.
const redChunk = 1 << 16

// floatRow reduces a row of n floats in redChunk pieces, merged in order.
func (r *ewReducer) floatRow(off, n int) ewFloatAcc {
	acc := r.float(off, min(n, redChunk))
	for s := redChunk; s < n; s += redChunk {
		p := r.float(off+s*r.stride, min(redChunk, n-s))
		acc.merge(&p)
	}
	return acc
}

// intRow is floatRow for integers and bools.
func (r *ewReducer) intRow(off, n int) ewIntAcc {
	acc := r.int(off, min(n, redChunk))
	for s := redChunk; s < n; s += redChunk {
		p := r.int(off+s*r.stride, min(redChunk, n-s))
		acc.merge(&p)
	}
	return acc
}

func (r *ewReducer) float(off, n int) ewFloatAcc {
	acc := newFloatAcc(r.op)
	for d := 0; d < n; d += ewBlock {
		acc.add(ewLoadF32(r.dt, r.data, off+d*r.stride, r.stride, min(ewBlock, n-d), r.fb))
	}
	return acc
}

func (r *ewReducer) int(off, n int) ewIntAcc {
	acc := newIntAcc(r.op)
	for d := 0; d < n; d += ewBlock {
		acc.add(ewLoadI64(r.dt, r.data, off+d*r.stride, r.stride, min(ewBlock, n-d), r.ib))
	}
	return acc
}

// Reduce reduces a over axes. Reductions read each row along the reduced
// axes as one strided run (dense for the common last-axis case); when the
// reduced axes cannot be walked as one run, they are first gathered into a
// dense copy. Rows longer than redChunk are reduced in fixed pieces merged
// in order; a few such rows run their pieces in parallel.
func (be *Backend) Reduce(op tensor.ReduceOp, a *tensor.Array, axes []int, keepDims bool) *tensor.Array {
	dt := a.DType()
	odt := reduceOutDType(op, dt)
	shp := a.Shape()
	src := get(a)
	isRed := make([]bool, len(shp))
	for _, ax := range axes {
		isRed[ax] = true
	}
	var outShape, kept, keptStr, red, redStr []int
	for i, d := range shp {
		if isRed[i] {
			red = append(red, d)
			redStr = append(redStr, src.strides[i])
			if keepDims {
				outShape = append(outShape, 1)
			}
		} else {
			kept = append(kept, d)
			keptStr = append(keptStr, src.strides[i])
			outShape = append(outShape, d)
		}
	}
	out, om := be.newArray(outShape, odt)
	rows, n := numel(kept), numel(red)
	if rows == 0 {
		return out
	}
	data, base := src.buf.data, src.off
	il := ewCollapse(red, redStr)
	if len(il.shape) > 1 {
		// the reduced axes do not form one strided run: gather kept ++ reduced densely
		perm := append(slices.Clone(kept), red...)
		permStr := append(slices.Clone(keptStr), redStr...)
		tmp := alloc(rows*n, dt)
		defer tmp.drop()
		copyStrided(tmp.data, &impl{buf: src.buf, off: src.off, strides: permStr}, perm, dt.Size())
		data, base = tmp.data, 0
		keptStr = rowMajor(kept)
		for i := range keptStr {
			keptStr[i] *= n
		}
		il = ewCollapse([]int{n}, []int{1})
	}
	stride := il.inner(0)
	if n == 0 {
		stride = 0
	}
	ol := ewCollapse(kept, rowMajor(kept), keptStr)
	od := om.buf.data
	isFloat := dt.IsFloat()
	newReducer := func() *ewReducer {
		return &ewReducer{op: op, dt: dt, data: data, stride: stride,
			fb: make([]float32, ewBlock), ib: make([]int64, ewBlock)}
	}
	store := func(oi int, f *ewFloatAcc, i *ewIntAcc) {
		if f != nil {
			ewStoreF32(odt, od, oi, 1, []float32{f.result()})
			return
		}
		switch op {
		case tensor.ReduceMean:
			ewStoreF32(odt, od, oi, 1, []float32{float32(i.f / float64(i.count))})
		case tensor.ReduceAny, tensor.ReduceAll:
			ewStoreI64(odt, od, oi, 1, []int64{int64(ewB2U(i.flag))})
		case tensor.ReduceMax, tensor.ReduceMin:
			v := i.v
			if i.count == 0 { // empty: the dtype's identity, not int64's
				lo, hi := ewIntRange(dt)
				v = lo
				if op == tensor.ReduceMin {
					v = hi
				}
			}
			ewStoreI64(odt, od, oi, 1, []int64{v})
		default:
			ewStoreI64(odt, od, oi, 1, []int64{i.v})
		}
	}
	if rows >= workers() || n <= redChunk {
		so, si := ol.inner(0), ol.inner(1)
		ewEach(ol, []int{0, base}, max(1, ewGrain/max(n, 1)), func() func([]int, int) {
			r := newReducer()
			return func(pos []int, cnt int) {
				for j := range cnt {
					oi, ii := pos[0]+j*so, pos[1]+j*si
					if isFloat {
						acc := r.floatRow(ii, n)
						store(oi, &acc, nil)
					} else {
						acc := r.intRow(ii, n)
						store(oi, nil, &acc)
					}
				}
			}
		})
		return out
	}
	// few long rows: their redChunk pieces in parallel, merged in order
	// (floatRow's arithmetic)
	bases := make([]int, 0, rows)
	ewEach(ol, []int{0, base}, rows, func() func([]int, int) {
		return func(pos []int, cnt int) {
			for j := range cnt {
				bases = append(bases, pos[1]+j*ol.inner(1))
			}
		}
	})
	chunk := redChunk
	parts := (n + chunk - 1) / chunk
	for oi, b := range bases {
		fa := make([]ewFloatAcc, parts)
		ia := make([]ewIntAcc, parts)
		parallelFor(parts, 1, func(lo, hi int) {
			r := newReducer()
			for p := lo; p < hi; p++ {
				s, e := p*chunk, min(n, (p+1)*chunk)
				if isFloat {
					fa[p] = r.float(b+s*stride, e-s)
				} else {
					ia[p] = r.int(b+s*stride, e-s)
				}
			}
		})
		if isFloat {
			for p := 1; p < parts; p++ {
				fa[0].merge(&fa[p])
			}
			store(oi, &fa[0], nil)
		} else {
			for p := 1; p < parts; p++ {
				ia[0].merge(&ia[p])
			}
			store(oi, nil, &ia[0])
		}
	}
	return out
}

// ---- ArgReduce ----

// ArgReduce returns the int32 index of the max (min) along axis, the first
// one on ties. NaN orders above every number, as in Sort: Argmax returns
// the first NaN, and Argmin skips NaNs unless the row is all NaN.
func (be *Backend) ArgReduce(op tensor.ArgReduceOp, a *tensor.Array, axis int, keepDims bool) *tensor.Array {
	dt := a.DType()
	im := get(a)
	var outShape, kept, keptIn []int
	for i, d := range a.Shape() {
		if i != axis {
			outShape = append(outShape, d)
			kept = append(kept, d)
			keptIn = append(keptIn, im.strides[i])
		} else if keepDims {
			outShape = append(outShape, 1)
		}
	}
	out, om := be.newArray(outShape, tensor.Int32)
	n := a.Shape()[axis]
	if out.Size() == 0 || n == 0 {
		return out
	}
	data, st := im.buf.data, im.strides[axis]
	ol := ewCollapse(kept, rowMajor(kept), keptIn)
	so, si := ol.inner(0), ol.inner(1)
	ewEach(ol, []int{0, im.off}, max(1, ewGrain/n), func() func([]int, int) {
		fb := make([]float32, ewBlock)
		ib := make([]int64, ewBlock)
		return func(pos []int, cnt int) {
			o := ewView[int32](om.buf.data)
			for j := range cnt {
				oi, ii := pos[0]+j*so, pos[1]+j*si
				best := 0
				if dt.IsFloat() {
					var bv float32
					for d := 0; d < n; d += ewBlock {
						x := ewLoadF32(dt, data, ii+d*st, st, min(ewBlock, n-d), fb)
						for k, v := range x {
							i := d + k
							if i == 0 {
								bv = v
								continue
							}
							if op == tensor.ArgMax {
								if v > bv || (v != v && bv == bv) {
									bv, best = v, i
								}
							} else if v < bv || (bv != bv && v == v) {
								bv, best = v, i
							}
						}
					}
				} else {
					var bv int64
					for d := 0; d < n; d += ewBlock {
						x := ewLoadI64(dt, data, ii+d*st, st, min(ewBlock, n-d), ib)
						for k, v := range x {
							i := d + k
							if i == 0 || (op == tensor.ArgMax && v > bv) || (op == tensor.ArgMin && v < bv) {
								bv, best = v, i
							}
						}
					}
				}
				o[oi] = int32(best)
			}
		}
	})
	return out
}

// ---- Softmax ----

// Softmax computes e^(x-max) / Σ e^(x-max) along axis in float32 and
// stores a's dtype. A row whose max is ±Inf or NaN (for instance all -Inf)
// gives NaN, as MLX does. A few long rows (vocabularies of logits) are
// split across workers, in the same fixed pieces a row is always summed in.
func (be *Backend) Softmax(a *tensor.Array, axis int) *tensor.Array {
	dt := a.DType()
	out, om := be.newArray(a.Shape(), dt)
	if a.Size() == 0 {
		return out
	}
	rows := ewRowsOf(a, axis)
	n, ist, ost := rows.n, rows.inStride, rows.outStride
	data, od := get(a).buf.data, om.buf.data
	direct := dt == tensor.Float32 && ost == 1
	if rows.count() < workers() && n > smChunk {
		// one row at a time, each split across the workers
		rows.eachGrain(rows.count(), func() func(int, int) {
			x := make([]float32, n)
			y := make([]float32, n)
			return func(oo, ii int) {
				xs := ewLoadF32(dt, data, ii, ist, n, x)
				ys := y
				if direct {
					ys = ewView[float32](od)[oo : oo+n]
				}
				ewSoftmaxParallel(xs, ys)
				if !direct {
					ewStoreF32(dt, od, oo, ost, ys)
				}
			}
		})
		return out
	}
	rows.each(func() func(int, int) {
		x := make([]float32, n)
		y := make([]float32, n)
		return func(oo, ii int) {
			xs := ewLoadF32(dt, data, ii, ist, n, x)
			ys := y
			if direct {
				ys = ewView[float32](od)[oo : oo+n]
			}
			m := ewMaxF32(float32(math.Inf(-1)), xs)
			var s float64
			for c := 0; c < n; c += smChunk {
				e := min(n, c+smChunk)
				s += ewExpSum(xs[c:e], ys[c:e], m)
			}
			ewScale(ys, float32(1/s))
			if !direct {
				ewStoreF32(dt, od, oo, ost, ys)
			}
		}
	})
	return out
}

func ewScale(y []float32, c float32) {
	for i := range y {
		y[i] *= c
	}
}

// smChunk is the length of the fixed pieces softmax sums a row's
// exponentials in (each piece's sum, then the pieces' sums in order), so
// that a row gives the same bits whole or split across workers.
const smChunk = 1 << 15

// ewSoftmaxParallel is softmax of one long row in three parallel passes
// over its smChunk pieces.
func ewSoftmaxParallel(x, y []float32) {
	n := len(x)
	chunk := smChunk
	parts := (n + chunk - 1) / chunk
	ms := make([]float32, parts)
	sums := make([]float64, parts)
	parallelFor(parts, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			ms[p] = ewMaxF32(float32(math.Inf(-1)), x[p*chunk:min(n, (p+1)*chunk)])
		}
	})
	m := ewMaxF32(float32(math.Inf(-1)), ms)
	parallelFor(parts, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			s, e := p*chunk, min(n, (p+1)*chunk)
			sums[p] = ewExpSum(x[s:e], y[s:e], m)
		}
	})
	var total float64
	for _, s := range sums {
		total += s
	}
	inv := float32(1 / total)
	parallelFor(parts, 1, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			ewScale(y[p*chunk:min(n, (p+1)*chunk)], inv)
		}
	})
}

// ---- Cumsum ----

// Cumsum is the running sum along axis. Bool sums to int32 (as in MLX);
// other dtypes keep theirs. Floats accumulate in float32, integers in
// wrapping int64 arithmetic truncated to the output type.
func (be *Backend) Cumsum(a *tensor.Array, axis int, reverse, inclusive bool) *tensor.Array {
	dt := a.DType()
	odt := dt
	if dt == tensor.Bool {
		odt = tensor.Int32
	}
	out, om := be.newArray(a.Shape(), odt)
	if a.Size() == 0 {
		return out
	}
	rows := ewRowsOf(a, axis)
	n, ist, ost := rows.n, rows.inStride, rows.outStride
	data, od := get(a).buf.data, om.buf.data
	rows.each(func() func(int, int) {
		fb := make([]float32, n)
		ib := make([]int64, n)
		fo := make([]float32, n)
		io := make([]int64, n)
		return func(oo, ii int) {
			if dt.IsFloat() {
				x := ewLoadF32(dt, data, ii, ist, n, fb)
				ewScan(x, fo, reverse, inclusive)
				ewStoreF32(odt, od, oo, ost, fo)
				return
			}
			x := ewLoadI64(dt, data, ii, ist, n, ib)
			ewScan(x, io, reverse, inclusive)
			ewStoreI64(odt, od, oo, ost, io)
		}
	})
	return out
}

func ewScan[T float32 | int64](x, y []T, reverse, inclusive bool) {
	var s T
	n := len(x)
	for k := range n {
		i := k
		if reverse {
			i = n - 1 - k
		}
		if inclusive {
			s += x[i]
			y[i] = s
		} else {
			y[i] = s
			s += x[i]
		}
	}
}
