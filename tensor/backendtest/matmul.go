package backendtest

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// checkScaled compares float results with a per-element bound
// rtol·|want| + k·scale[i], the error model of sums: scale is Σ|terms|.
func (c *checker) checkScaled(what string, got *tensor.Array, shape []int, dt tensor.DType, want, scale []float64, rtol, k float64) bool {
	c.t.Helper()
	if !c.checkLayout(what, got, shape, dt) {
		return false
	}
	g := vals(got)
	bad := 0
	var lines []string
	for i := range want {
		lim := rtol*abs(want[i]) + k*scale[i] + subnormalStep(dt)
		if d := abs(g[i] - want[i]); !(d <= lim) {
			bad++
			if len(lines) < 6 {
				lines = append(lines, fmt.Sprintf("  at %v: got %v, want %v (bound %.3g)", unravel(i, shape), g[i], want[i], lim))
			}
		}
	}
	if bad > 0 {
		c.Errorf("%s: %d of %d values differ:\n%s", what, bad, len(want), strings.Join(lines, "\n"))
		return false
	}
	return true
}

// subnormalStep is the spacing of dt's smallest values, below which
// rounding error is absolute rather than relative.
func subnormalStep(dt tensor.DType) float64 {
	if dt == tensor.Float16 {
		return 1.0 / (1 << 24)
	}
	return 1e-37
}

// matmulTol returns the rtol and sum-scale factor for a product with inner
// dim k computed in float32 and rounded to dt.
func matmulTol(dt tensor.DType, k int) (rtol, ks float64) {
	return 2 * unitRoundoff(dt), float64(k+2) * unitRoundoff(tensor.Float32)
}

type mmCase struct {
	as, bs []int
	la, lb layout
}

func matmulCases() []testCase {
	var cs []testCase
	cases := []mmCase{
		{[]int{5, 7}, []int{7, 3}, dense, dense},
		{[]int{64, 128}, []int{128, 96}, dense, dense},
		{[]int{1, 256}, []int{256, 33}, dense, dense},
		{[]int{33, 1}, []int{1, 9}, dense, dense},
		{[]int{2, 5, 7}, []int{2, 7, 4}, dense, dense},
		{[]int{2, 1, 5, 7}, []int{3, 7, 4}, dense, dense},
		{[]int{5, 7}, []int{3, 7, 4}, dense, dense},
		{[]int{3, 5, 7}, []int{7, 4}, dense, dense},
		{[]int{7}, []int{7, 4}, dense, dense},
		{[]int{5, 7}, []int{7}, dense, dense},
		{[]int{7}, []int{7}, dense, dense},
		{[]int{2, 5, 7}, []int{7}, dense, dense},
		{[]int{9, 20}, []int{20, 11}, transposed, dense},
		{[]int{9, 20}, []int{20, 11}, dense, transposed},
		{[]int{9, 20}, []int{20, 11}, transposed, transposed},
		{[]int{2, 17, 40}, []int{2, 40, 24}, dense, transposed},
		{[]int{2, 17, 40}, []int{2, 40, 24}, strided, strided},
		{[]int{3, 6, 8}, []int{3, 8, 5}, broadcast, dense},
		{[]int{4, 8}, []int{3, 8, 5}, dense, broadcast},
		{[]int{4, 0}, []int{0, 5}, dense, dense},
		{[]int{0, 6}, []int{6, 5}, dense, dense},
		{[]int{2, 3, 0, 4}, []int{4, 2}, dense, dense},
	}
	for i, m := range cases {
		dts := []tensor.DType{tensor.Float32}
		if i < 3 || i == 5 || i == 13 || i == 15 {
			dts = floatTypes
		}
		for _, dt := range dts {
			cs = append(cs, testCase{fmt.Sprintf("%s/%v%s@%v%s", dt, m.as, m.la, m.bs, m.lb), func(c *checker) {
				a, av := c.in(m.as, dt, uni(-1, 1), m.la)
				b, bv := c.in(m.bs, dt, uni(-1, 1), m.lb)
				// the reference promotes 1-D operands as NumPy does
				as, bs := m.as, m.bs
				if len(as) == 1 {
					as = []int{1, as[0]}
				}
				if len(bs) == 1 {
					bs = []int{bs[0], 1}
				}
				want, scale, shape := matmulRef(av, as, bv, bs)
				if len(m.as) == 1 || len(m.bs) == 1 {
					var s []int
					s = append(s, shape[:len(shape)-2]...)
					if len(m.as) > 1 {
						s = append(s, shape[len(shape)-2])
					}
					if len(m.bs) > 1 {
						s = append(s, shape[len(shape)-1])
					}
					if s == nil {
						s = []int{}
					}
					shape = s
				}
				rtol, ks := matmulTol(dt, m.as[len(m.as)-1])
				c.checkScaled("Matmul", c.T(tensor.Matmul(a, b)), shape, dt, want, scale, rtol, ks)
			}})
		}
	}
	cs = append(cs,
		testCase{"float32/Transpose-of-weight", func(c *checker) {
			// the Linear layer: x [B, T, K] @ Wᵀ with W stored [N, K]
			x, xv := c.in([]int{2, 3, 48}, tensor.Float32, uni(-1, 1), dense)
			w, wv := c.in([]int{20, 48}, tensor.Float32, uni(-1, 1), dense)
			wt := c.T(tensor.Transpose(w))
			want, scale, shape := matmulRef(xv, []int{2, 3, 48}, transposeRef(wv, []int{20, 48}, []int{1, 0}), []int{48, 20})
			rtol, ks := matmulTol(tensor.Float32, 48)
			c.checkScaled("Matmul", c.T(tensor.Matmul(x, wt)), shape, tensor.Float32, want, scale, rtol, ks)
		}},
		testCase{"float32/batch-permuted", func(c *checker) {
			// b stored [K, B, N] and viewed as [B, K, N]: the batch stride is not the largest
			base, bv := c.in([]int{6, 3, 5}, tensor.Float32, uni(-1, 1), dense)
			b := c.T(tensor.Transpose(base, 1, 0, 2))
			a, av := c.in([]int{3, 4, 6}, tensor.Float32, uni(-1, 1), transposed)
			want, scale, shape := matmulRef(av, []int{3, 4, 6}, transposeRef(bv, []int{6, 3, 5}, []int{1, 0, 2}), []int{3, 6, 5})
			rtol, ks := matmulTol(tensor.Float32, 6)
			c.checkScaled("Matmul", c.T(tensor.Matmul(a, b)), shape, tensor.Float32, want, scale, rtol, ks)
		}},
		testCase{"mixed/bfloat16@float32", func(c *checker) {
			a, av := c.in([]int{3, 8}, tensor.BFloat16, uni(-1, 1), dense)
			b, bv := c.in([]int{8, 2}, tensor.Float32, uni(-1, 1), dense)
			want, scale, shape := matmulRef(av, []int{3, 8}, bv, []int{8, 2})
			rtol, ks := matmulTol(tensor.Float32, 8)
			c.checkScaled("Matmul", c.T(tensor.Matmul(a, b)), shape, tensor.Float32, want, scale, rtol, ks)
		}},
		testCase{"float32/large-values", func(c *checker) {
			a := c.arr([]float64{1e20, 1, -1e20, 3}, []int{1, 4}, tensor.Float32)
			b := c.arr([]float64{1, 1, 1, 1}, []int{4, 1}, tensor.Float32)
			got := c.T(tensor.Matmul(a, b))
			if v := got.Float64s(); len(v) != 1 || math.IsNaN(v[0]) {
				c.Errorf("Matmul = %v", v)
			}
		}},
	)
	return cs
}

// ---- indexing: Take, TakeAlongAxis, PutAlongAxis ----

func takeRef(av []float64, as []int, iv []float64, is []int, axis int) ([]float64, []int) {
	var shape []int
	shape = append(shape, as[:axis]...)
	shape = append(shape, is...)
	shape = append(shape, as[axis+1:]...)
	if shape == nil {
		shape = []int{}
	}
	out := make([]float64, numel(shape))
	for o := range out {
		idx := unravel(o, shape)
		src := make([]int, len(as))
		copy(src, idx[:axis])
		ii := ravel(idx[axis:axis+len(is)], is)
		k := int(iv[ii])
		if k < 0 {
			k += as[axis]
		}
		src[axis] = k
		copy(src[axis+1:], idx[axis+len(is):])
		out[o] = av[ravel(src, as)]
	}
	return out, shape
}

func indexingCases() []testCase {
	var cs []testCase
	type takeCase struct {
		as   []int
		is   []int
		axis int
		idt  tensor.DType
		lay  layout
	}
	takes := []takeCase{
		{[]int{10, 4}, []int{6}, 0, tensor.Int32, dense},
		{[]int{10, 4}, []int{2, 3}, 0, tensor.Int32, transposed},
		{[]int{3, 8, 2}, []int{5}, 1, tensor.Int64, dense},
		{[]int{3, 8}, []int{2, 2}, -1, tensor.Uint32, strided},
		{[]int{5, 6}, []int{}, 0, tensor.Int32, dense},
		{[]int{5, 6}, []int{0}, 1, tensor.Int32, dense},
	}
	for _, tk := range takes {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
			cs = append(cs, testCase{fmt.Sprintf("Take/%s/%v%s/idx%s%v/axis%d", dt, tk.as, tk.lay, tk.idt, tk.is, tk.axis), func(c *checker) {
				a, av := c.in(tk.as, dt, uni(-5, 5), tk.lay)
				ax := tk.axis
				if ax < 0 {
					ax += len(tk.as)
				}
				n := tk.as[ax]
				g := ints(-n, n-1) // negative indices count from the end
				if tk.idt == tensor.Uint32 {
					g = ints(0, n-1)
				}
				idx, iv := c.in(tk.is, tk.idt, g, dense)
				want, shape := takeRef(av, tk.as, iv, tk.is, ax)
				c.check("Take", c.T(tensor.Take(a, idx, tk.axis)), shape, dt, want, tol{})
			}})
		}
	}
	cs = append(cs, testCase{"Take/row-gather/embedding", func(c *checker) {
		// an embedding lookup: ids [B, T] into a [V, D] table
		tbl, tv := c.in([]int{50, 16}, tensor.BFloat16, uni(-1, 1), dense)
		ids, iv := c.in([]int{2, 5}, tensor.Int32, ints(0, 49), dense)
		want, shape := takeRef(tv, []int{50, 16}, iv, []int{2, 5}, 0)
		c.check("Take", c.T(tensor.Take(tbl, ids, 0)), shape, tensor.BFloat16, want, tol{})
	}})
	type alongCase struct {
		as, is []int
		axis   int
	}
	alongs := []alongCase{
		{[]int{4, 6}, []int{4, 3}, 1},
		{[]int{4, 6}, []int{1, 3}, 1},
		{[]int{4, 6}, []int{2, 6}, 0},
		{[]int{2, 3, 5}, []int{2, 3, 1}, -1},
		{[]int{2, 3, 5}, []int{2, 4, 5}, 1},
	}
	for _, al := range alongs {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Int32} {
			cs = append(cs, testCase{fmt.Sprintf("TakeAlongAxis/%s/%v/idx%v/axis%d", dt, al.as, al.is, al.axis), func(c *checker) {
				ax := (al.axis + len(al.as)) % len(al.as)
				a, av := c.in(al.as, dt, ints(-50, 50), transposed)
				idx, iv := c.in(al.is, tensor.Int32, ints(0, al.as[ax]-1), dense)
				shape := slices.Clone(al.as)
				for d := range shape {
					if d == ax {
						shape[d] = al.is[d]
					} else {
						shape[d] = max(al.as[d], al.is[d])
					}
				}
				want := make([]float64, numel(shape))
				for o := range want {
					oi := unravel(o, shape)
					k := int(iv[bcastIndex(oi, al.is)])
					src := slices.Clone(oi)
					for d := range src {
						if al.as[d] == 1 {
							src[d] = 0
						}
					}
					src[ax] = k
					want[o] = av[ravel(src, al.as)]
				}
				c.check("TakeAlongAxis", c.T(tensor.TakeAlongAxis(a, idx, al.axis)), shape, dt, want, tol{})
			}})
		}
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
		for _, vshape := range [][]int{{4, 2}, {1, 1}} {
			for _, axis := range []int{1, 0} {
				cs = append(cs, testCase{fmt.Sprintf("PutAlongAxis/%s/values%v/axis%d", dt, vshape, axis), func(c *checker) {
					as := []int{4, 6}
					is := []int{4, 2}
					vs := vshape
					if axis == 0 {
						as, is = []int{6, 4}, []int{2, 4}
						vs = []int{vshape[1], vshape[0]}
					}
					a, av := c.in(as, dt, ints(-9, 9), dense)
					// distinct indices per lane, so the result does not depend on write order
					iv := make([]float64, numel(is))
					lanes(is, axis, func(idx []int) {
						perm := c.rng.Perm(6)
						for k, i := range idx {
							iv[i] = float64(perm[k])
						}
					})
					idx := c.arr(iv, is, tensor.Int32)
					v, vv := c.in(vs, dt, ints(100, 120), dense)
					want := append([]float64(nil), av...)
					for i := range iv {
						ii := unravel(i, is)
						dst := slices.Clone(ii)
						dst[axis] = int(iv[i])
						want[ravel(dst, as)] = vv[bcastIndex(ii, vs)]
					}
					c.check("PutAlongAxis", c.T(tensor.PutAlongAxis(a, idx, v, axis)), as, dt, want, tol{})
					c.check("PutAlongAxis input unchanged", a, as, dt, av, tol{})
				}})
			}
		}
	}
	cs = append(cs, testCase{"PutAlongAxis/duplicates-last-wins", func(c *checker) {
		a := c.arr([]float64{0, 0, 0, 0}, []int{1, 4}, tensor.Float32)
		idx := c.arr([]float64{2, 0, 2}, []int{1, 3}, tensor.Int32)
		v := c.arr([]float64{5, 6, 7}, []int{1, 3}, tensor.Float32)
		c.check("PutAlongAxis", c.T(tensor.PutAlongAxis(a, idx, v, 1)), []int{1, 4}, tensor.Float32, []float64{6, 0, 7, 0}, tol{})
	}})
	return cs
}
