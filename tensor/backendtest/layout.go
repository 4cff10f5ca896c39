package backendtest

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// sliceRef applies Python slicing with positive steps (negative and
// out-of-range bounds clamp) to v of shape; nil stop/step mean whole/1.
func sliceRef(v []float64, shape, start, stop, step []int) ([]float64, []int) {
	n := len(shape)
	b, st := make([]int, n), make([]int, n)
	out := make([]int, n)
	for d := 0; d < n; d++ {
		lo, hi, k := 0, shape[d], 1
		if d < len(start) {
			lo = start[d]
		}
		if d < len(stop) {
			hi = stop[d]
		}
		if d < len(step) {
			k = step[d]
		}
		if lo < 0 {
			lo += shape[d]
		}
		if hi < 0 {
			hi += shape[d]
		}
		lo = min(max(lo, 0), shape[d])
		hi = min(max(hi, lo), shape[d])
		b[d], st[d] = lo, k
		out[d] = (hi - lo + k - 1) / k
	}
	r := make([]float64, numel(out))
	for i := range r {
		idx := unravel(i, out)
		for d := range idx {
			idx[d] = b[d] + idx[d]*st[d]
		}
		r[i] = v[ravel(idx, shape)]
	}
	return r, out
}

// regionPositions lists the flat indices of shape covered by a slice.
func regionPositions(shape, start, stop, step []int) []int {
	idxs := make([]float64, numel(shape))
	for i := range idxs {
		idxs[i] = float64(i)
	}
	r, _ := sliceRef(idxs, shape, start, stop, step)
	out := make([]int, len(r))
	for i, x := range r {
		out[i] = int(x)
	}
	return out
}

func layoutCases() []testCase {
	var cs []testCase
	type sl struct {
		shape             []int
		start, stop, step []int
	}
	slicesList := []sl{
		{[]int{6, 8}, []int{1, 2}, []int{5, 7}, nil},
		{[]int{6, 8}, []int{-5, 1}, []int{100, -1}, []int{2, 3}},
		{[]int{6, 8}, []int{0}, []int{-100}, nil},
		{[]int{4, 5, 6}, []int{0, -2, 1}, []int{4, 5, 6}, []int{3, 1, 2}},
		{[]int{4, 5, 6}, []int{1}, nil, nil},
		{[]int{10}, []int{-3}, []int{-1}, []int{1}},
		{[]int{10}, []int{9}, []int{3}, nil},
	}
	for _, s := range slicesList {
		for _, lay := range []layout{dense, transposed} {
			cs = append(cs, testCase{fmt.Sprintf("Slice/%v%s/[%v:%v:%v]", s.shape, lay, s.start, s.stop, s.step), func(c *checker) {
				a, av := c.in(s.shape, tensor.Float32, uni(-5, 5), lay)
				want, shape := sliceRef(av, s.shape, s.start, s.stop, s.step)
				v := c.T(tensor.Slice(a, s.start, s.stop, s.step))
				c.check("Slice", v, shape, tensor.Float32, want, tol{})
				// a slice of the slice, then an op on the view
				if len(shape) > 0 && shape[0] > 1 {
					w, wshape := sliceRef(want, shape, []int{1}, nil, []int{2})
					vv := c.T(tensor.Slice(v, []int{1}, nil, []int{2}))
					c.check("Slice of slice", vv, wshape, tensor.Float32, w, tol{})
					for i := range w {
						w[i] = -w[i]
					}
					c.check("Neg of slice view", c.T(tensor.Neg(vv)), wshape, tensor.Float32, w, tol{})
				}
			}})
		}
	}
	cs = append(cs,
		testCase{"SliceAxis+Split", func(c *checker) {
			a, av := c.in([]int{3, 7, 2}, tensor.BFloat16, uni(-5, 5), dense)
			want, shape := sliceRef(av, []int{3, 7, 2}, []int{0, 2, 0}, []int{3, 5, 2}, nil)
			c.check("SliceAxis", c.T(tensor.SliceAxis(a, 1, 2, 5)), shape, tensor.BFloat16, want, tol{})
			want, shape = sliceRef(av, []int{3, 7, 2}, []int{0, 0, 1}, []int{3, 7, 2}, nil)
			c.check("SliceAxis -1", c.T(tensor.SliceAxis(a, -1, 1, 2)), shape, tensor.BFloat16, want, tol{})
			parts := tensor.Split(a, []int{2, 0, 4, 1}, 1)
			off := 0
			for i, p := range parts {
				c.T(p)
				sz := []int{2, 0, 4, 1}[i]
				want, shape := sliceRef(av, []int{3, 7, 2}, []int{0, off}, []int{3, off + sz}, nil)
				c.check(fmt.Sprintf("Split part %d", i), p, shape, tensor.BFloat16, want, tol{})
				off += sz
			}
		}},
	)
	type upd struct {
		shape             []int
		start, stop, step []int
		ushape            []int
	}
	upds := []upd{
		{[]int{5, 6}, []int{1, 2}, []int{3, 5}, nil, []int{2, 3}},
		{[]int{5, 6}, []int{0, 1}, []int{5, 6}, []int{2, 2}, []int{1, 3}},
		{[]int{5, 6}, []int{-2}, nil, nil, []int{}},
		{[]int{2, 4, 6}, []int{0, 0, 3}, []int{2, 4, 4}, nil, []int{2, 4, 1}},
	}
	for _, u := range upds {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
			cs = append(cs, testCase{fmt.Sprintf("SliceUpdate+SetSlice/%s/%v[%v:%v:%v]=%v", dt, u.shape, u.start, u.stop, u.step, u.ushape), func(c *checker) {
				a, av := c.in(u.shape, dt, ints(-50, 50), dense)
				up, uv := c.in(u.ushape, dt, ints(100, 200), transposed)
				_, region := sliceRef(av, u.shape, u.start, u.stop, u.step)
				pos := regionPositions(u.shape, u.start, u.stop, u.step)
				uexp := expand(uv, u.ushape, region)
				want := append([]float64(nil), av...)
				for i, p := range pos {
					want[p] = uexp[i]
				}
				c.check("SliceUpdate", c.T(tensor.SliceUpdate(a, up, u.start, u.stop, u.step)), u.shape, dt, want, tol{})
				c.check("SliceUpdate leaves input", a, u.shape, dt, av, tol{})

				// SetSlice: in place, but views and copies taken before keep the old values
				view := c.T(tensor.Slice(a, nil, nil, nil))
				same := c.T(tensor.AsType(a, dt))
				tr := c.T(tensor.Transpose(a))
				a.SetSlice(up, u.start, u.stop, u.step)
				c.check("SetSlice", a, u.shape, dt, want, tol{})
				c.check("view taken before SetSlice", view, u.shape, dt, av, tol{})
				c.check("AsType copy taken before SetSlice", same, u.shape, dt, av, tol{})
				rev := make([]int, len(u.shape))
				for i := range rev {
					rev[i] = len(u.shape) - 1 - i
				}
				trShape := make([]int, len(u.shape))
				for i, p := range rev {
					trShape[i] = u.shape[p]
				}
				c.check("transposed view taken before SetSlice", tr, trShape, dt, transposeRef(av, u.shape, rev), tol{})
			}})
		}
	}
	cs = append(cs,
		testCase{"SetSlice/on-a-view", func(c *checker) {
			base, bv := c.in([]int{4, 6}, tensor.Float32, uni(-5, 5), dense)
			v := c.T(tensor.SliceAxis(base, 1, 1, 5)) // [4, 4] view
			vv, _ := sliceRef(bv, []int{4, 6}, []int{0, 1}, []int{4, 5}, nil)
			z := c.T(tensor.Zeros([]int{4, 1}, tensor.Float32))
			v.SetSlice(z, []int{0, 0}, []int{4, 1}, nil)
			for i := 0; i < 4; i++ {
				vv[i*4] = 0
			}
			c.check("SetSlice on view", v, []int{4, 4}, tensor.Float32, vv, tol{})
			c.check("base of the view is untouched", base, []int{4, 6}, tensor.Float32, bv, tol{})
		}},
		testCase{"SetSlice/row-view-update", func(c *checker) {
			// a batch's keys [1, H, T, D] written one token (a strided view
			// with dense rows) at a time into a block pool [N, H, S, D], as
			// paged caches do; and a view of the pool itself as the update
			keys, kv := c.in([]int{1, 2, 3, 4}, tensor.BFloat16, uni(-1, 1), dense)
			pool := c.T(tensor.Zeros([]int{3, 2, 5, 4}, tensor.BFloat16))
			want := make([]float64, 3*2*5*4)
			for tok := 0; tok < 3; tok++ {
				u := c.T(tensor.SliceAxis(keys, 2, tok, tok+1)) // [1, 2, 1, 4]
				blk, pos := tok%3, 4-tok
				pool.SetSlice(u, []int{blk, 0, pos, 0}, []int{blk + 1, 2, pos + 1, 4}, nil)
				for h := 0; h < 2; h++ {
					for d := 0; d < 4; d++ {
						want[((blk*2+h)*5+pos)*4+d] = kv[(h*3+tok)*4+d]
					}
				}
			}
			if !c.check("pool after row writes", pool, []int{3, 2, 5, 4}, tensor.BFloat16, want, tol{}) {
				return
			}
			src := c.T(tensor.Slice(pool, []int{0, 0, 4, 0}, []int{1, 2, 5, 4}, nil)) // block 0's slot 4, a view of pool
			pool.SetSlice(src, []int{2, 0, 0, 0}, []int{3, 2, 1, 4}, nil)
			for h := 0; h < 2; h++ {
				for d := 0; d < 4; d++ {
					want[((2*2+h)*5+0)*4+d] = want[((0*2+h)*5+4)*4+d]
				}
			}
			c.check("pool after a self write", pool, []int{3, 2, 5, 4}, tensor.BFloat16, want, tol{})
		}},
		testCase{"SetSlice/repeated-kv-write", func(c *checker) {
			// the KV-cache pattern: write one step at a time, reading views in between
			cache := c.T(tensor.Zeros([]int{1, 2, 8, 4}, tensor.BFloat16))
			want := make([]float64, 64)
			for step := 0; step < 8; step++ {
				kv, kvv := c.in([]int{1, 2, 1, 4}, tensor.BFloat16, uni(-1, 1), dense)
				cache.SetSlice(kv, []int{0, 0, step, 0}, []int{1, 2, step + 1, 4}, nil)
				for h := 0; h < 2; h++ {
					for d := 0; d < 4; d++ {
						want[h*32+step*4+d] = kvv[h*4+d]
					}
				}
				got := c.T(tensor.SliceAxis(cache, 2, 0, step+1))
				w, s := sliceRef(want, []int{1, 2, 8, 4}, []int{0, 0, 0, 0}, []int{1, 2, step + 1, 4}, nil)
				if !c.check(fmt.Sprintf("cache after step %d", step), got, s, tensor.BFloat16, w, tol{}) {
					return
				}
			}
		}},
	)
	// reshape and friends, on contiguous and non-contiguous inputs
	for _, lay := range []layout{dense, transposed, strided, broadcast} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int64, tensor.Bool} {
			cs = append(cs, testCase{fmt.Sprintf("Reshape+Transpose+Squeeze/%s/%s", dt, lay), func(c *checker) {
				shape := []int{2, 3, 4}
				g := ints(-1000, 1000)
				if dt == tensor.Bool {
					g = pick(0, 1)
				}
				a, av := c.in(shape, dt, g, lay)
				c.check("Reshape(-1)", c.T(tensor.Reshape(a, -1)), []int{24}, dt, av, tol{})
				c.check("Reshape(4,-1)", c.T(tensor.Reshape(a, 4, -1)), []int{4, 6}, dt, av, tol{})
				c.check("Flatten", c.T(tensor.Flatten(a)), []int{24}, dt, av, tol{})
				c.check("Transpose()", c.T(tensor.Transpose(a)), []int{4, 3, 2}, dt, transposeRef(av, shape, []int{2, 1, 0}), tol{})
				c.check("Transpose(1,2,0)", c.T(tensor.Transpose(a, 1, 2, 0)), []int{3, 4, 2}, dt, transposeRef(av, shape, []int{1, 2, 0}), tol{})
				c.check("Transpose(-1,0,1)", c.T(tensor.Transpose(a, -1, 0, 1)), []int{4, 2, 3}, dt, transposeRef(av, shape, []int{2, 0, 1}), tol{})
				c.check("SwapAxes(0,-1)", c.T(tensor.SwapAxes(a, 0, -1)), []int{4, 3, 2}, dt, transposeRef(av, shape, []int{2, 1, 0}), tol{})
				e := c.T(tensor.ExpandDims(a, -1))
				c.check("ExpandDims(-1)", e, []int{2, 3, 4, 1}, dt, av, tol{})
				c.check("ExpandDims(1)", c.T(tensor.ExpandDims(a, 1)), []int{2, 1, 3, 4}, dt, av, tol{})
				c.check("Squeeze()", c.T(tensor.Squeeze(e)), []int{2, 3, 4}, dt, av, tol{})
				c.check("Squeeze(3)", c.T(tensor.Squeeze(e, 3)), []int{2, 3, 4}, dt, av, tol{})
				c.check("Contiguous", c.T(tensor.Contiguous(a)), shape, dt, av, tol{})
				tr := c.T(tensor.Transpose(a))
				trc := c.T(tensor.Contiguous(tr))
				c.check("Contiguous of transpose", trc, []int{4, 3, 2}, dt, transposeRef(av, shape, []int{2, 1, 0}), tol{})
				c.check("Reshape of transpose", c.T(tensor.Reshape(tr, 4, 6)), []int{4, 6}, dt, transposeRef(av, shape, []int{2, 1, 0}), tol{})
			}})
		}
	}
	cs = append(cs,
		testCase{"BroadcastTo+Contiguous", func(c *checker) {
			a, av := c.in([]int{3, 1}, tensor.Float32, uni(-5, 5), dense)
			b := c.T(tensor.BroadcastTo(a, 2, 3, 4))
			want := expand(av, []int{3, 1}, []int{2, 3, 4})
			c.check("BroadcastTo", b, []int{2, 3, 4}, tensor.Float32, want, tol{})
			c.check("Contiguous of broadcast", c.T(tensor.Contiguous(b)), []int{2, 3, 4}, tensor.Float32, want, tol{})
			s := c.arr([]float64{7}, []int{}, tensor.Float32)
			c.check("BroadcastTo from scalar", c.T(tensor.BroadcastTo(s, 2, 2)), []int{2, 2}, tensor.Float32, []float64{7, 7, 7, 7}, tol{})
			c.check("BroadcastTo empty", c.T(tensor.BroadcastTo(a, 0, 3, 5)), []int{0, 3, 5}, tensor.Float32, nil, tol{})
		}},
		testCase{"Reshape/empty", func(c *checker) {
			a := c.T(tensor.Zeros([]int{0, 4}, tensor.Float32))
			c.check("Reshape", c.T(tensor.Reshape(a, 2, 0, 3)), []int{2, 0, 3}, tensor.Float32, nil, tol{})
		}},
	)
	type cat struct {
		shapes [][]int
		axis   int
	}
	cats := []cat{
		{[][]int{{2, 3}, {4, 3}}, 0},
		{[][]int{{2, 3}, {2, 1}, {2, 5}}, 1},
		{[][]int{{2, 3, 4}, {2, 3, 2}}, -1},
		{[][]int{{2, 0, 4}, {2, 3, 4}}, 1},
		{[][]int{{3, 2}}, 0},
	}
	for _, ct := range cats {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
			cs = append(cs, testCase{fmt.Sprintf("Concatenate/%s/%v/axis%d", dt, ct.shapes, ct.axis), func(c *checker) {
				var arrs []*tensor.Array
				var vs [][]float64
				for i, s := range ct.shapes {
					lay := []layout{dense, transposed, strided}[i%3]
					a, av := c.in(s, dt, ints(-99, 99), lay)
					arrs = append(arrs, a)
					vs = append(vs, av)
				}
				nd := len(ct.shapes[0])
				ax := (ct.axis + nd) % nd
				shape := slices.Clone(ct.shapes[0])
				shape[ax] = 0
				for _, s := range ct.shapes {
					shape[ax] += s[ax]
				}
				want := make([]float64, numel(shape))
				for o := range want {
					idx := unravel(o, shape)
					k := idx[ax]
					for i, s := range ct.shapes {
						if k < s[ax] {
							idx[ax] = k
							want[o] = vs[i][ravel(idx, s)]
							break
						}
						k -= s[ax]
					}
				}
				c.check("Concatenate", c.T(tensor.Concatenate(arrs, ct.axis)), shape, dt, want, tol{})
			}})
		}
	}
	cs = append(cs, testCase{"Concatenate/promotes", func(c *checker) {
		a := c.arr([]float64{1, 2}, []int{2}, tensor.Int32)
		b := c.arr([]float64{0.5}, []int{1}, tensor.Float32)
		c.check("Concatenate", c.T(tensor.Concatenate([]*tensor.Array{a, b}, 0)), []int{3}, tensor.Float32, []float64{1, 2, 0.5}, tol{})
	}})
	for _, axis := range []int{0, 1, -1, 2} {
		cs = append(cs, testCase{fmt.Sprintf("Stack/axis%d", axis), func(c *checker) {
			shape := []int{2, 3}
			var arrs []*tensor.Array
			var vs [][]float64
			for i := 0; i < 3; i++ {
				a, av := c.in(shape, tensor.Float32, uni(-5, 5), []layout{dense, transposed, broadcast}[i])
				arrs = append(arrs, a)
				vs = append(vs, av)
			}
			ax := (axis + 3) % 3
			out := []int{2, 3}
			out = append(out[:ax], append([]int{3}, out[ax:]...)...)
			want := make([]float64, numel(out))
			for o := range want {
				idx := unravel(o, out)
				k := idx[ax]
				src := append(append([]int{}, idx[:ax]...), idx[ax+1:]...)
				want[o] = vs[k][ravel(src, shape)]
			}
			c.check("Stack", c.T(tensor.Stack(arrs, axis)), out, tensor.Float32, want, tol{})
		}})
	}
	return cs
}
