package backendtest

import (
	"fmt"
	"math"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// unpackRef reads the quantized integers of one packed row: MLX stores
// element j of a row at bits [j·bits, (j+1)·bits) of the row's
// little-endian byte stream.
func unpackRef(words []byte, k, bits int) []int {
	q := make([]int, k)
	for j := range q {
		v := 0
		for b := 0; b < bits; b++ {
			pos := j*bits + b
			if words[pos/8]>>(pos%8)&1 != 0 {
				v |= 1 << b
			}
		}
		q[j] = v
	}
	return q
}

// dequantRef unpacks wq [..., N, K·bits/32] with scales and biases
// [..., N, K/g] into float64 [..., N, K].
func dequantRef(wq *tensor.Array, sv, bv []float64, g, bits int) (w []float64, q []int, shape []int) {
	raw := wq.Bytes()
	ws := wq.Shape()
	rows := numel(ws[:len(ws)-1])
	rowBytes := ws[len(ws)-1] * 4
	k := ws[len(ws)-1] * 32 / bits
	shape = append(slices.Clone(ws[:len(ws)-1]), k)
	w = make([]float64, rows*k)
	q = make([]int, rows*k)
	for r := 0; r < rows; r++ {
		qs := unpackRef(raw[r*rowBytes:(r+1)*rowBytes], k, bits)
		for j, x := range qs {
			s, b := sv[r*(k/g)+j/g], bv[r*(k/g)+j/g]
			w[r*k+j] = s*float64(x) + b
			q[r*k+j] = x
		}
	}
	return w, q, shape
}

type quantized struct {
	wq, s, b *tensor.Array
	w        []float64 // the dequantized weight, from the packed bits
	mag      []float64 // |scale·q| + |bias| per element: the scale of dtype rounding
}

// quantize quantizes a random weight of shape with the backend and checks
// the round trip; it returns the packed arrays and their float64 meaning.
func (c *checker) quantize(shape []int, dt tensor.DType, g, bits int) (quantized, []float64, bool) {
	w, wv := c.in(shape, dt, uni(-1, 1), dense)
	wq, s, b := tensor.Quantize(w, g, bits)
	c.T(wq)
	c.T(s)
	c.T(b)
	nd := len(shape)
	k := shape[nd-1]
	ps := slices.Clone(shape)
	ps[nd-1] = k * bits / 32
	ss := slices.Clone(shape)
	ss[nd-1] = k / g
	if !slices.Equal(wq.Shape(), ps) || wq.DType() != tensor.Uint32 ||
		!slices.Equal(s.Shape(), ss) || s.DType() != dt || !slices.Equal(b.Shape(), ss) || b.DType() != dt {
		c.Errorf("Quantize: wq %s%v, scales %s%v, biases %s%v; want uint32%v and %s%v",
			wq.DType(), wq.Shape(), s.DType(), s.Shape(), b.DType(), b.Shape(), ps, dt, ss)
		return quantized{}, nil, false
	}
	sv, bv := vals(s), vals(b)
	deq, q, _ := dequantRef(wq, sv, bv, g, bits)
	u := unitRoundoff(dt)
	nbins := float64(int(1)<<bits - 1)
	bad := 0
	for i := range wv {
		gi := i / g
		sc, bi := math.Abs(sv[gi]), math.Abs(bv[gi])
		// Within the grid the error is half a step. MLX then moves the
		// scale so the group's extreme lands on the grid exactly, which
		// can push the far end of the range up to one step past the last
		// grid point: there the error grows to at most one step.
		t := 0.0
		if sv[gi] != 0 {
			t = (wv[i] - bv[gi]) / sv[gi]
		}
		excess := max(0, t-nbins-0.5, -0.5-t)
		if excess > 0.5+1e-3 {
			excess = 0 // farther out than MLX's scheme allows: report it
		}
		bound := sc/2 + excess*sc + u*(nbins*sc+bi+math.Abs(wv[i])) + 1e-6*sc
		if d := math.Abs(deq[i] - wv[i]); !(d <= bound) && bad < 5 {
			bad++
			c.Errorf("Quantize(g=%d, bits=%d): element %v = %v comes back as %v (q=%d, scale %v, bias %v): error %.3g > %.3g",
				g, bits, unravel(i, shape), wv[i], deq[i], q[i], sv[gi], bv[gi], d, bound)
		}
	}
	// MLX's affine scheme puts the group's value of largest magnitude on the grid exactly
	for grp := 0; grp < len(wv)/g && bad < 5; grp++ {
		lo, hi := grp*g, grp*g
		for j := grp * g; j < (grp+1)*g; j++ {
			if wv[j] < wv[lo] {
				lo = j
			}
			if wv[j] > wv[hi] {
				hi = j
			}
		}
		edge := hi
		if math.Abs(wv[lo]) > math.Abs(wv[hi]) {
			edge = lo
		}
		if d := math.Abs(deq[edge] - wv[edge]); d > 2*u*math.Abs(wv[edge])+1e-7 {
			bad++
			c.Errorf("Quantize(g=%d, bits=%d): group %d's extreme value %v comes back as %v (want exact, as MLX)", g, bits, grp, wv[edge], deq[edge])
		}
	}
	mag := make([]float64, len(deq))
	for i := range mag {
		mag[i] = math.Abs(sv[i/g]*float64(q[i])) + math.Abs(bv[i/g])
	}
	return quantized{wq, s, b, deq, mag}, wv, bad == 0
}

func quantCases() []testCase {
	var cs []testCase
	for _, bits := range tensor.QuantBitsSupported {
		for _, g := range tensor.QuantGroupsSupported {
			dts := []tensor.DType{tensor.Float32}
			if g == 64 {
				dts = append(dts, tensor.BFloat16)
			}
			if g == 32 && bits == 4 {
				dts = append(dts, tensor.Float16)
			}
			for _, dt := range dts {
				cs = append(cs, testCase{fmt.Sprintf("Quantize+Dequantize/%s/bits%d/group%d", dt, bits, g), func(c *checker) {
					shape := []int{4, 256}
					qz, _, ok := c.quantize(shape, dt, g, bits)
					if !ok {
						return
					}
					// s·q + b may be computed in the dtype (as MLX's CPU kernel
					// does), rounding s·q before the bias cancels part of it
					u := unitRoundoff(dt)
					c.checkScaled("Dequantize", c.T(tensor.Dequantize(qz.wq, qz.s, qz.b, g, bits, dt)), shape, dt, qz.w, qz.mag, u, 2*u)
					c.checkScaled("Dequantize to scales' dtype", c.T(tensor.Dequantize(qz.wq, qz.s, qz.b, g, bits, tensor.Invalid)), shape, dt, qz.w, qz.mag, u, 2*u)
					if dt != tensor.Float32 {
						c.checkScaled("Dequantize to float32", c.T(tensor.Dequantize(qz.wq, qz.s, qz.b, g, bits, tensor.Float32)), shape, tensor.Float32, qz.w, qz.mag, u, 2*u)
					}
				}})
			}
		}
	}
	cs = append(cs,
		testCase{"Quantize/3-D+constant-groups", func(c *checker) {
			// experts first; one group constant (zero range) must still round-trip
			w := make([]float64, 2*3*64)
			for i := range w {
				w[i] = roundTo(c.rng.Float64()*2-1, tensor.Float32)
			}
			for i := 0; i < 32; i++ {
				w[i] = 0.25
				w[64+i] = 0
			}
			wa := c.arr(w, []int{2, 3, 64}, tensor.Float32)
			wq, s, b := tensor.Quantize(wa, 32, 4)
			c.T(wq)
			c.T(s)
			c.T(b)
			if !slices.Equal(wq.Shape(), []int{2, 3, 8}) || !slices.Equal(s.Shape(), []int{2, 3, 2}) {
				c.Errorf("Quantize 3-D: wq %v, scales %v", wq.Shape(), s.Shape())
				return
			}
			deq, _, _ := dequantRef(wq, vals(s), vals(b), 32, 4)
			sv := vals(s)
			for i := range w {
				if d := math.Abs(deq[i] - w[i]); d > math.Abs(sv[i/32])+1e-6 {
					c.Errorf("element %d: %v comes back as %v", i, w[i], deq[i])
					return
				}
			}
		}},
	)
	// QuantizedMatmul against the float64 product with the dequantized weight
	type qmm struct {
		xs        []int
		n, k      int
		transpose bool
		g, bits   int
		dt        tensor.DType
		lay       layout
	}
	qmms := []qmm{
		{[]int{3, 256}, 40, 256, true, 64, 4, tensor.Float32, dense},
		{[]int{2, 3, 256}, 40, 256, true, 64, 4, tensor.BFloat16, dense},
		{[]int{1, 128}, 24, 128, true, 32, 3, tensor.Float32, dense},
		{[]int{5, 128}, 16, 128, true, 128, 8, tensor.Float32, transposed},
		{[]int{4, 256}, 8, 256, true, 32, 6, tensor.Float16, dense},
		{[]int{2, 128}, 8, 128, true, 64, 2, tensor.Float32, strided},
		{[]int{2, 128}, 8, 128, true, 64, 5, tensor.BFloat16, dense},
		{[]int{3, 24}, 128, 24, false, 64, 4, tensor.Float32, dense},
		{[]int{2, 3, 16}, 256, 16, false, 32, 8, tensor.BFloat16, dense},
		{[]int{1, 40}, 128, 40, false, 128, 3, tensor.Float32, transposed},
		{[]int{256}, 12, 256, true, 64, 4, tensor.Float32, dense},
		{[]int{0, 64}, 12, 64, true, 64, 4, tensor.Float32, dense},
	}
	for _, m := range qmms {
		cs = append(cs, testCase{fmt.Sprintf("QuantizedMatmul/%s/x%v%s/transpose=%v/%dx%d/g%d/bits%d", m.dt, m.xs, m.lay, m.transpose, m.n, m.k, m.g, m.bits), func(c *checker) {
			// transpose: w is [N, K] (x @ wᵀ); else w is [K, N] packed along N
			ws := []int{m.n, m.k}
			if !m.transpose {
				ws = []int{m.k, m.n}
			}
			qz, _, ok := c.quantize(ws, m.dt, m.g, m.bits)
			if !ok {
				return
			}
			x, xv := c.in(m.xs, m.dt, uni(-1, 1), m.lay)
			wmat, mag := qz.w, qz.mag
			if m.transpose {
				wmat = transposeRef(qz.w, ws, []int{1, 0})
				mag = transposeRef(qz.mag, ws, []int{1, 0})
			}
			xs := m.xs
			if len(xs) == 1 {
				xs = []int{1, xs[0]}
			}
			want, scale, _ := qmmRef(xv, xs, wmat, mag, []int{m.k, m.n})
			shape := append(slices.Clone(m.xs[:len(m.xs)-1]), m.n)
			rtol, ks := qmmTol(m.dt, m.k)
			c.checkScaled("QuantizedMatmul", c.T(tensor.QuantizedMatmul(x, qz.wq, qz.s, qz.b, m.transpose, m.g, m.bits)), shape, m.dt, want, scale, rtol, ks)
		}})
	}
	cs = append(cs, testCase{"QuantizedMatmul/batched-weight", func(c *checker) {
		// w with a batch dim: x [2, 3, K] against w [2, N, K]
		qz, _, ok := c.quantize([]int{2, 8, 64}, tensor.Float32, 32, 4)
		if !ok {
			return
		}
		x, xv := c.in([]int{2, 3, 64}, tensor.Float32, uni(-1, 1), dense)
		var want, scale []float64
		for b := 0; b < 2; b++ {
			w := transposeRef(qz.w[b*512:(b+1)*512], []int{8, 64}, []int{1, 0})
			mag := transposeRef(qz.mag[b*512:(b+1)*512], []int{8, 64}, []int{1, 0})
			o, s, _ := qmmRef(xv[b*192:(b+1)*192], []int{3, 64}, w, mag, []int{64, 8})
			want = append(want, o...)
			scale = append(scale, s...)
		}
		rtol, ks := qmmTol(tensor.Float32, 64)
		c.checkScaled("QuantizedMatmul", c.T(tensor.QuantizedMatmul(x, qz.wq, qz.s, qz.b, true, 32, 4)), []int{2, 3, 8}, tensor.Float32, want, scale, rtol, ks)
	}})
	// GatherQMM against per-expert products
	type gq struct {
		xs        []int
		lhs       []int // lhs indices shape (nil: none)
		rhs       []int
		e, n, k   int
		transpose bool
		dt        tensor.DType
	}
	gqs := []gq{
		{[]int{4, 1, 64}, nil, []int{4}, 3, 16, 64, true, tensor.Float32},
		{[]int{2, 2, 64}, []int{4}, []int{4}, 3, 16, 64, true, tensor.Float32},
		{[]int{2, 3, 1, 64}, nil, []int{2, 3}, 4, 8, 64, true, tensor.BFloat16},
		{[]int{1, 2, 64}, nil, []int{5}, 3, 8, 64, true, tensor.Float32},
		{[]int{3, 1, 16}, nil, []int{3}, 2, 64, 16, false, tensor.Float32},
		{[]int{6, 2, 64}, []int{2, 2}, []int{2, 2}, 4, 16, 64, true, tensor.BFloat16},
	}
	for _, m := range gqs {
		cs = append(cs, testCase{fmt.Sprintf("GatherQMM/%s/x%v/lhs%v/rhs%v/E%d/transpose=%v", m.dt, m.xs, m.lhs, m.rhs, m.e, m.transpose), func(c *checker) {
			const g, bits = 64, 4
			ws := []int{m.e, m.n, m.k}
			if !m.transpose {
				ws = []int{m.e, m.k, m.n}
			}
			qz, _, ok := c.quantize(ws, m.dt, g, bits)
			if !ok {
				return
			}
			x, xv := c.in(m.xs, m.dt, uni(-1, 1), dense)
			nd := len(m.xs)
			mm := m.xs[nd-2]
			xBatch := m.xs[:nd-2]
			rhs, rv := c.in(m.rhs, tensor.Int32, ints(0, m.e-1), dense)
			var lhs *tensor.Array
			var lv []float64
			idxShape := m.rhs
			if m.lhs != nil {
				lhs, lv = c.in(m.lhs, tensor.Int32, ints(0, numel(xBatch)-1), dense)
				idxShape = broadcastShape(m.lhs, m.rhs)
			} else {
				idxShape = broadcastShape(xBatch, m.rhs)
			}
			shape := append(slices.Clone(idxShape), mm, m.n)
			want := make([]float64, numel(shape))
			scale := make([]float64, numel(shape))
			wq := qz.w
			for p := 0; p < numel(idxShape); p++ {
				pi := unravel(p, idxShape)
				ex := int(rv[bcastIndex(pi, m.rhs)])
				var xo int
				if m.lhs != nil {
					xo = int(lv[bcastIndex(pi, m.lhs)])
				} else {
					xo = bcastIndex(pi, xBatch)
				}
				xm := xv[xo*mm*m.k : (xo+1)*mm*m.k]
				we := wq[ex*m.n*m.k : (ex+1)*m.n*m.k]
				me := qz.mag[ex*m.n*m.k : (ex+1)*m.n*m.k]
				if m.transpose {
					we = transposeRef(we, []int{m.n, m.k}, []int{1, 0})
					me = transposeRef(me, []int{m.n, m.k}, []int{1, 0})
				}
				o, s, _ := qmmRef(xm, []int{mm, m.k}, we, me, []int{m.k, m.n})
				copy(want[p*mm*m.n:], o)
				copy(scale[p*mm*m.n:], s)
			}
			rtol, ks := qmmTol(m.dt, m.k)
			c.checkScaled("GatherQMM", c.T(tensor.GatherQMM(x, qz.wq, qz.s, qz.b, lhs, rhs, m.transpose, g, bits)), shape, m.dt, want, scale, rtol, ks)
		}})
	}
	return cs
}

// qmmRef is the float64 product x [..., M, K] @ w [K, N] for a dequantized
// weight, with its error scale Σ|x|·(|s·q|+|b|): kernels (MLX's too) add
// s·Σq·x and b·Σx separately, so their rounding scales with the parts of
// each weight, which can exceed the weight itself.
func qmmRef(xv []float64, xs []int, w, mag []float64, ws []int) (out, scale []float64, shape []int) {
	out, _, shape = matmulRef(xv, xs, w, ws)
	_, scale, _ = matmulRef(xv, xs, mag, ws)
	return out, scale, shape
}

// qmmTol is matmulTol plus the dequantized weight's rounding to dt and
// 2⁻¹⁸ relative per term: a kernel may feed float32 activations to
// hardware bfloat16 dot products as hi = bf16(x) plus lo = bf16(x − hi),
// which is within 2⁻¹⁸·|x| of x.
func qmmTol(dt tensor.DType, k int) (rtol, ks float64) {
	rtol, ks = matmulTol(dt, k)
	return rtol, ks + 2*unitRoundoff(dt) + 1.0/(1<<18)
}

func roundAll(v []float64, dt tensor.DType) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = roundTo(x, dt)
	}
	return out
}

// ---- random ----

// threefryRef is the threefry-2x32 block function (20 rounds) that MLX's
// generator is built on, written from the Random123 description.
func threefryRef(key [2]uint32, ctr [2]uint32) [2]uint32 {
	rot := [8]uint32{13, 15, 26, 6, 17, 29, 16, 24}
	ks := [3]uint32{key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA}
	x0, x1 := ctr[0]+ks[0], ctr[1]+ks[1]
	for blk := 0; blk < 5; blk++ {
		for r := 0; r < 4; r++ {
			x0 += x1
			s := rot[(blk%2)*4+r]
			x1 = x1<<s | x1>>(32-s)
			x1 ^= x0
		}
		x0 += ks[(blk+1)%3]
		x1 += ks[(blk+2)%3] + uint32(blk+1)
	}
	return [2]uint32{x0, x1}
}

// randomBitsRef lays out n words for one key as MLX does: counters
// (i, i+half') fill positions i and i+half' for the first half, and an odd
// count takes the first word of counter (half, 0) for the middle.
func randomBitsRef(key [2]uint32, n int) []uint32 {
	out := make([]uint32, n)
	half := n / 2
	odd := n % 2
	for i := 0; i < half; i++ {
		r := threefryRef(key, [2]uint32{uint32(i), uint32(i + half + odd)})
		out[i], out[i+half+odd] = r[0], r[1]
	}
	if odd == 1 {
		out[half] = threefryRef(key, [2]uint32{uint32(half), 0})[0]
	}
	return out
}

func keyWords(seed uint64) [2]uint32 { return [2]uint32{uint32(seed >> 32), uint32(seed)} }

func randomCases() []testCase {
	var cs []testCase
	for _, shape := range [][]int{{4}, {5}, {2, 3}, {1}, {}, {3, 0}, {1000}} {
		cs = append(cs, testCase{fmt.Sprintf("RandomBits/%v", shape), func(c *checker) {
			seed := c.rng.Uint64()
			key := c.T(tensor.KeyOn(c.be, seed))
			bits := c.T(tensor.RandomBits(key, shape...))
			want := randomBitsRef(keyWords(seed), numel(shape))
			wf := make([]float64, len(want))
			for i, w := range want {
				wf[i] = float64(w)
			}
			c.check(fmt.Sprintf("RandomBits(key %#x)", seed), bits, shape, tensor.Uint32, wf, tol{})
			again := c.T(tensor.RandomBits(key, shape...))
			c.check("RandomBits again with the same key", again, shape, tensor.Uint32, wf, tol{})
		}})
	}
	cs = append(cs,
		testCase{"RandomBits/known-key0", func(c *checker) {
			// key(0) = (0, 0): the first counter pair's hash, pinned independently of the layout
			key := c.T(tensor.KeyOn(c.be, 0))
			bits := c.T(tensor.RandomBits(key, 2)).Int64s()
			r := threefryRef([2]uint32{0, 0}, [2]uint32{0, 1})
			if len(bits) != 2 || uint32(bits[0]) != r[0] || uint32(bits[1]) != r[1] {
				c.Errorf("RandomBits(key(0), 2) = %v, want %v", bits, r)
			}
		}},
		testCase{"RandomBits/different-keys-differ", func(c *checker) {
			a := c.T(tensor.RandomBits(c.T(tensor.KeyOn(c.be, 1)), 64)).Int64s()
			b := c.T(tensor.RandomBits(c.T(tensor.KeyOn(c.be, 2)), 64)).Int64s()
			same := 0
			for i := range a {
				if a[i] == b[i] {
					same++
				}
			}
			if same > 2 {
				c.Errorf("keys 1 and 2 share %d of 64 words", same)
			}
		}},
		testCase{"SplitKey", func(c *checker) {
			seed := c.rng.Uint64()
			key := c.T(tensor.KeyOn(c.be, seed))
			ks := c.T(tensor.SplitKey(key, 3))
			want := randomBitsRef(keyWords(seed), 6)
			wf := make([]float64, 6)
			for i, w := range want {
				wf[i] = float64(w)
			}
			c.check("SplitKey", ks, []int{3, 2}, tensor.Uint32, wf, tol{})
			k1, k2 := tensor.SplitKey2(key)
			c.T(k1)
			c.T(k2)
			w2 := randomBitsRef(keyWords(seed), 4)
			c.check("SplitKey2 first", k1, []int{2}, tensor.Uint32, []float64{float64(w2[0]), float64(w2[1])}, tol{})
			c.check("SplitKey2 second", k2, []int{2}, tensor.Uint32, []float64{float64(w2[2]), float64(w2[3])}, tol{})
			if w2[0] == w2[2] && w2[1] == w2[3] {
				c.Errorf("split keys are equal")
			}
		}},
	)
	for _, dt := range floatTypes {
		for _, rng := range [][2]float64{{0, 1}, {-2, 3}} {
			if dt != tensor.Float32 && rng[0] != 0 {
				continue
			}
			cs = append(cs, testCase{fmt.Sprintf("Uniform/%s/[%g,%g)", dt, rng[0], rng[1]), func(c *checker) {
				const n = 20000
				seed := c.rng.Uint64()
				key := c.T(tensor.KeyOn(c.be, seed))
				u := c.T(tensor.Uniform(key, []int{100, n / 100}, rng[0], rng[1], dt))
				if !slices.Equal(u.Shape(), []int{100, n / 100}) || u.DType() != dt {
					c.Errorf("Uniform: %s%v", u.DType(), u.Shape())
					return
				}
				uv := vals(u)
				sum := 0.0
				for i, x := range uv {
					if !(x >= rng[0] && x < rng[1]) {
						c.Errorf("Uniform value %d = %v outside [%g, %g)", i, x, rng[0], rng[1])
						return
					}
					sum += x
				}
				mean := sum / n
				width := rng[1] - rng[0]
				sigma := width / math.Sqrt(12*n)
				if mid := rng[0] + width/2; math.Abs(mean-mid) > 5*sigma+unitRoundoff(dt)*width {
					c.Errorf("Uniform mean %v, want %v ± %v", mean, mid, 5*sigma)
				}
				if dt == tensor.Float32 {
					// bit-for-bit from the words: u = bits/(2³²-1) in float32, capped below 1
					words := randomBitsRef(keyWords(seed), n)
					for i, w := range words {
						f := float32(w) / float32(math.MaxUint32)
						f = min(f, math.Nextafter32(1, 0))
						want := float64(float32(float32(rng[1])-float32(rng[0]))*f + float32(rng[0]))
						if math.Abs(uv[i]-want) > 1e-6*width {
							c.Errorf("Uniform[%d] = %v, want %v from word %#x", i, uv[i], want, w)
							return
						}
					}
				}
			}})
		}
	}
	cs = append(cs,
		testCase{"Categorical/chi-square", func(c *checker) {
			const n, k = 20000, 5
			logits := []float64{0.5, -1, 2, 0, math.Inf(-1)}
			l := c.arr(logits, []int{1, k}, tensor.Float32)
			lb := c.T(tensor.BroadcastTo(l, n, k))
			key := c.T(tensor.KeyOn(c.be, c.rng.Uint64()))
			s := c.T(tensor.Categorical(key, lb, -1))
			if !slices.Equal(s.Shape(), []int{n}) || s.DType() != tensor.Int32 {
				c.Errorf("Categorical: %s%v, want int32[%d]", s.DType(), s.Shape(), n)
				return
			}
			counts := make([]float64, k)
			for _, v := range s.Int64s() {
				if v < 0 || v >= k {
					c.Errorf("Categorical sample %d out of range", v)
					return
				}
				counts[v]++
			}
			if counts[4] != 0 {
				c.Errorf("Categorical drew a -inf logit %v times", counts[4])
			}
			p := softmaxRef(logits, []int{k}, 0, false)
			chi := 0.0
			for i := 0; i < k-1; i++ {
				e := p[i] * n
				chi += (counts[i] - e) * (counts[i] - e) / e
			}
			// 3 degrees of freedom: P(χ² > 27.9) ≈ 4e-6
			if chi > 27.9 {
				c.Errorf("Categorical counts %v vs probabilities %v: χ² = %.1f", counts, p, chi)
			}
		}},
		testCase{"Categorical/rows", func(c *checker) {
			// each row's sample follows its own logits: one-hot rows are deterministic
			lv := []float64{0, -1e9, -1e9, -1e9, -1e9, 5, -1e9, 4, -1e9}
			l := c.arr(lv, []int{3, 3}, tensor.Float32)
			s := c.T(tensor.Categorical(c.T(tensor.KeyOn(c.be, 7)), l, 1))
			got := s.Int64s()
			if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 1 {
				c.Errorf("Categorical rows = %v, want [0 2 1]", got)
			}
		}},
		testCase{"Gumbel/moments", func(c *checker) {
			const n = 20000
			g := c.T(tensor.Gumbel(c.T(tensor.KeyOn(c.be, c.rng.Uint64())), []int{n}, tensor.Float32))
			gv := vals(g)
			sum := 0.0
			for _, x := range gv {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					c.Errorf("Gumbel drew %v", x)
					return
				}
				sum += x
			}
			mean := sum / n
			sd := math.Pi / math.Sqrt(6) / math.Sqrt(n)
			if math.Abs(mean-0.5772156649) > 5*sd {
				c.Errorf("Gumbel mean %v, want 0.5772 ± %v", mean, 5*sd)
			}
		}},
	)
	return cs
}

// ---- misuse panics with *tensor.Error ----

func errorCases() []testCase {
	return []testCase{
		{"Add/shape-mismatch", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2, 3}, tensor.Float32))
			b := c.T(tensor.Zeros([]int{4}, tensor.Float32))
			c.checkErr("Add([2 3], [4])", tensor.ErrShape, func() { tensor.Add(a, b) })
		}},
		{"Matmul/inner-dim", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2, 3}, tensor.Float32))
			b := c.T(tensor.Zeros([]int{4, 5}, tensor.Float32))
			c.checkErr("Matmul([2 3], [4 5])", tensor.ErrShape, func() { tensor.Matmul(a, b) })
		}},
		{"use-after-Free", func(c *checker) {
			a := tensor.Zeros([]int{2}, tensor.Float32)
			b := c.T(tensor.Zeros([]int{2}, tensor.Float32))
			a.Free()
			a.Free() // twice is a no-op
			c.checkErr("Add(freed, b)", tensor.ErrFreed, func() { tensor.Add(a, b) })
			c.checkErr("freed.Shape()", tensor.ErrFreed, func() { a.Shape() })
			c.checkErr("freed.Float32s()", tensor.ErrFreed, func() { a.Float32s() })
			if !a.Freed() {
				c.Errorf("Freed() = false after Free")
			}
		}},
		{"Reshape/size", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2, 3}, tensor.Float32))
			c.checkErr("Reshape([2 3], 4)", tensor.ErrShape, func() { tensor.Reshape(a, 4) })
		}},
		{"BitwiseAnd/float", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2}, tensor.Float32))
			c.checkErr("BitwiseAnd(float32)", tensor.ErrDType, func() { tensor.BitwiseAnd(a, a) })
		}},
		{"Take/float-indices", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2}, tensor.Float32))
			c.checkErr("Take with float indices", tensor.ErrDType, func() { tensor.Take(a, a, 0) })
		}},
		{"Argmax/empty-axis", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2, 0}, tensor.Float32))
			c.checkErr("Argmax over empty axis", tensor.ErrArgument, func() { tensor.Argmax(a, 1, false) })
		}},
		{"Quantize/bad-bits", func(c *checker) {
			a := c.T(tensor.Zeros([]int{2, 64}, tensor.Float32))
			c.checkErr("Quantize bits 7", tensor.ErrArgument, func() { tensor.Quantize(a, 64, 7) })
		}},
		{"Try/passes-through", func(c *checker) {
			if err := tensor.Try(func() {}); err != nil {
				c.Errorf("Try(no panic) = %v", err)
			}
			err := tensor.Try(func() { panic("boom") })
			if err == nil || !isErr(err, tensor.ErrBackend) {
				c.Errorf("Try(panic(string)) = %v, want an ErrBackend *tensor.Error", err)
			}
		}},
	}
}
