package cpu

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// lrCase is one low-rank problem: x [m, in], y [m, out] and pairs of
// ranks rs, with the values as the arrays hold them.
type lrCase struct {
	m, in, out int
	x, y       *tensor.Array
	xv, yv     []float32
	a, b       []*tensor.Array
	av, bv     [][]float32
}

func newLRCase(m, in, out int, ranks []int, act, wdt tensor.DType, seed uint32) *lrCase {
	c := &lrCase{m: m, in: in, out: out}
	c.xv = fzRound(fzRand(m*in, seed), act)
	c.yv = fzRound(fzRand(m*out, seed+1), act)
	c.x = tensor.FromFloat32(c.xv, []int{m, in}, act)
	c.y = tensor.FromFloat32(c.yv, []int{m, out}, act)
	for i, r := range ranks {
		av := fzRound(fzRand(r*in, seed+10+uint32(i)), wdt)
		bv := fzRound(fzRand(out*r, seed+20+uint32(i)), wdt)
		c.av, c.bv = append(c.av, av), append(c.bv, bv)
		c.a = append(c.a, tensor.FromFloat32(av, []int{r, in}, wdt))
		c.b = append(c.b, tensor.FromFloat32(bv, []int{out, r}, wdt))
	}
	return c
}

func (c *lrCase) pairs() []tensor.LowRankPair {
	ps := make([]tensor.LowRankPair, len(c.a))
	for i := range c.a {
		ps[i] = tensor.LowRankPair{A: c.a[i], B: c.b[i]}
	}
	return ps
}

// ref is the float64 result for ids, and a bound on the magnitudes that
// went into each value (for the tolerance).
func (c *lrCase) ref(ids []int) (want, mag []float64) {
	want, mag = make([]float64, c.m*c.out), make([]float64, c.m*c.out)
	for i := range c.m {
		for j := range c.out {
			y := float64(c.yv[i*c.out+j])
			want[i*c.out+j], mag[i*c.out+j] = y, math.Abs(y)
		}
		p := ids[i]
		if p < 0 {
			continue
		}
		r := len(c.av[p]) / c.in
		for q := range r {
			var t, tm float64
			for k := range c.in {
				v := float64(c.xv[i*c.in+k]) * float64(c.av[p][q*c.in+k])
				t += v
				tm += math.Abs(v)
			}
			for j := range c.out {
				w := float64(c.bv[p][j*r+q])
				want[i*c.out+j] += t * w
				mag[i*c.out+j] += tm * math.Abs(w)
			}
		}
	}
	return want, mag
}

// lrUnit is the relative precision of dt's stores.
func lrUnit(dt tensor.DType) float64 {
	switch dt {
	case tensor.BFloat16:
		return 1.0 / 256
	case tensor.Float16:
		return 1.0 / 2048
	}
	return 1.0 / (1 << 23)
}

func lrCheck(t *testing.T, what string, got *tensor.Array, want, mag []float64) {
	t.Helper()
	g := got.Float32s()
	u := lrUnit(got.DType())
	bad := 0
	for i := range g {
		// one rounding of the result plus float32 sums over in terms
		tol := u*math.Abs(want[i]) + 1e-5*mag[i] + 1e-30
		if d := math.Abs(float64(g[i]) - want[i]); math.IsNaN(d) || d > tol {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v (tolerance %.3g)", what, i, g[i], want[i], tol)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d values off", what, bad, len(g))
	}
}

// withPortable runs f on the portable kernels (no AVX-512).
func withPortable(f func()) {
	old := hasAVX512
	hasAVX512 = false
	defer func() { hasAVX512 = old }()
	f()
}

func TestLowRankAccuracy(t *testing.T) {
	type dts struct{ act, w tensor.DType }
	for _, d := range []dts{
		{tensor.BFloat16, tensor.BFloat16}, {tensor.Float16, tensor.Float16},
		{tensor.Float32, tensor.Float32}, {tensor.BFloat16, tensor.Float32}, {tensor.Float32, tensor.Float16},
	} {
		for _, sh := range [][4]int{{1, 64, 16, 16}, {3, 5, 7, 1}, {9, 300, 100, 20}, {2, 2*kc + 37, 33, 48}, {70, 130, 19, 16}} {
			m, in, out, r := sh[0], sh[1], sh[2], sh[3]
			for _, portable := range []bool{false, true} {
				name := fmt.Sprintf("%s-%s/m%d-in%d-out%d-r%d/portable=%v", d.act, d.w, m, in, out, r, portable)
				t.Run(name, func(t *testing.T) {
					s := tensor.NewScope()
					defer s.Close()
					c := newLRCase(m, in, out, []int{r}, d.act, d.w, uint32(m*in+out))
					ids := make([]int, m)
					want, mag := c.ref(ids)
					var got *tensor.Array
					run := func() { got = tensor.LowRank(c.y, c.x, c.a[0], c.b[0]) }
					if portable {
						withPortable(run)
					} else {
						run()
					}
					if got.DType() != d.act || got.Dim(0) != m || got.Dim(1) != out {
						t.Fatalf("result %v", got)
					}
					lrCheck(t, "LowRank", got, want, mag)
				})
			}
		}
	}
}

// TestLowRankGatherAccuracy: each row its own pair (or none), against
// float64.
func TestLowRankGatherAccuracy(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float32} {
		s := tensor.NewScope()
		c := newLRCase(11, 2*kc+3, 45, []int{16, 8, 33}, dt, dt, 7)
		ids := []int{0, 1, 2, -1, 2, 2, 0, -1, 1, 0, 2}
		want, mag := c.ref(ids)
		got := tensor.LowRankGather(c.y, c.x, c.pairs(), ids)
		lrCheck(t, "LowRankGather "+dt.String(), got, want, mag)
		// rows without a pair are y exactly
		g, y := got.Float32s(), c.yv
		for _, i := range []int{3, 7} {
			for j := range c.out {
				if g[i*c.out+j] != y[i*c.out+j] {
					t.Fatalf("row %d without a pair changed", i)
				}
			}
		}
		s.Close()
	}
}

// TestLowRankInvariant: a row's bytes do not depend on the other rows of
// the call (M=1 and M>1 alike), nor on the worker count.
func TestLowRankInvariant(t *testing.T) {
	for _, portable := range []bool{false, true} {
		for _, sh := range [][4]int{{70, 2*kc + 5, 50, 16}, {8, 2048, 8192 / 16, 16}, {5, 8192, 64, 48}, {3, 40, 17, 20}, {4, 9*kc + 7, 200, 16}, {2, 4 * kc, 64, 1}} {
			m, in, out, r := sh[0], sh[1], sh[2], sh[3]
			name := fmt.Sprintf("m%d-in%d-out%d-r%d/portable=%v", m, in, out, r, portable)
			t.Run(name, func(t *testing.T) {
				body := func() {
					s := tensor.NewScope()
					defer s.Close()
					c := newLRCase(m, in, out, []int{r}, tensor.BFloat16, tensor.BFloat16, uint32(in))
					bt := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.b[0])))
					at := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.a[0])))
					for _, p := range [][2]*tensor.Array{{c.a[0], c.b[0]}, {c.a[0], bt}, {at, bt}, {at, c.b[0]}} {
						a, b := p[0], p[1]
						checkRowInvariant(t, name, m,
							func() *tensor.Array { return tensor.LowRank(c.y, c.x, a, b) },
							func(i int) *tensor.Array {
								return tensor.LowRank(rowOf(c.y, 0, i), rowOf(c.x, 0, i), a, b)
							})
					}
				}
				if portable {
					withPortable(body)
				} else {
					body()
				}
			})
		}
	}
}

// TestLowRankGatherInvariant: in a mixed call every row equals its solo
// run with its own pair, bit for bit, and a row without one equals y.
func TestLowRankGatherInvariant(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(fmt.Sprintf("portable=%v", portable), func(t *testing.T) {
			body := func() {
				s := tensor.NewScope()
				defer s.Close()
				c := newLRCase(9, 2*kc+11, 70, []int{16, 4, 24}, tensor.BFloat16, tensor.BFloat16, 3)
				ids := []int{2, 0, -1, 1, 0, 0, 2, 1, -1}
				checkRowInvariant(t, "LowRankGather", len(ids),
					func() *tensor.Array { return tensor.LowRankGather(c.y, c.x, c.pairs(), ids) },
					func(i int) *tensor.Array {
						y := rowOf(c.y, 0, i)
						if ids[i] < 0 {
							return y
						}
						return tensor.LowRank(y, rowOf(c.x, 0, i), c.a[ids[i]], c.b[ids[i]])
					})
				// the same adapter on every row equals LowRank
				same := make([]int, len(ids))
				for i := range same {
					same[i] = 1
				}
				g := tensor.LowRankGather(c.y, c.x, c.pairs(), same).Bytes()
				w := tensor.LowRank(c.y, c.x, c.a[1], c.b[1]).Bytes()
				if !bytes.Equal(g, w) {
					t.Fatal("LowRankGather with one id differs from LowRank")
				}
			}
			if portable {
				withPortable(body)
			} else {
				body()
			}
		})
	}
}

// TestLowRankViews: strided operands (a transposed B, a sliced x, 3-D
// rows) give what their dense copies give.
func TestLowRankViews(t *testing.T) {
	t.Run("simd", testLowRankViews)
	t.Run("portable", func(t *testing.T) { withPortable(func() { testLowRankViews(t) }) })
}

func testLowRankViews(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	c := newLRCase(6, 96, 40, []int{16}, tensor.BFloat16, tensor.BFloat16, 5)
	want := tensor.LowRank(c.y, c.x, c.a[0], c.b[0]).Bytes()
	bt := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.b[0])))
	wide := tensor.Concatenate([]*tensor.Array{c.x, c.x}, 1)
	xv := tensor.SliceAxis(wide, 1, 96, 192)
	if got := tensor.LowRank(c.y, xv, c.a[0], bt).Bytes(); !bytes.Equal(got, want) {
		t.Fatal("strided operands differ")
	}
	got := tensor.LowRank(tensor.Reshape(c.y, 2, 3, 40), tensor.Reshape(c.x, 2, 3, 96), c.a[0], c.b[0])
	if got.Dim(0) != 2 || got.Dim(1) != 3 || !bytes.Equal(got.Bytes(), want) {
		t.Fatal("3-D rows differ")
	}
}

// TestLowRankTransposed: A and B as transposed views of dense Aᵀ and Bᵀ
// (how lora mounts them; the kernel reads them with no copy, four chains
// interleaved) give the bytes of their dense copies, for each weight
// type, over shapes with whole and partial runs of four input blocks and
// of 64 output columns, and ranks below, at and past 16.
func TestLowRankTransposed(t *testing.T) {
	for _, portable := range []bool{false, true} {
		for _, wdt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16} {
			for _, sh := range [][4]int{{1, 2048, 8192, 16}, {1, 8192, 2048, 16}, {3, 9*kc + 7, 200, 20}, {2, 5 * kc, 129, 48}, {1, 4 * kc, 64, 4}, {2, 33, 15, 1}} {
				m, in, out, r := sh[0], sh[1], sh[2], sh[3]
				name := fmt.Sprintf("%s/m%d-in%d-out%d-r%d/portable=%v", wdt, m, in, out, r, portable)
				t.Run(name, func(t *testing.T) {
					body := func() {
						s := tensor.NewScope()
						defer s.Close()
						c := newLRCase(m, in, out, []int{r}, tensor.BFloat16, wdt, uint32(in+r))
						want := tensor.LowRank(c.y, c.x, c.a[0], c.b[0]).Bytes()
						at := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.a[0])))
						bt := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.b[0])))
						for i, p := range [][2]*tensor.Array{{at, c.b[0]}, {c.a[0], bt}, {at, bt}} {
							if got := tensor.LowRank(c.y, c.x, p[0], p[1]).Bytes(); !bytes.Equal(got, want) {
								t.Fatalf("operands %d (transposed A %v, B %v) differ from the dense ones", i, i != 1, i != 0)
							}
						}
						if m == 1 {
							return
						}
						ids := make([]int, m)
						for i := range ids {
							ids[i] = i%2 - 1 + i%3/2 // -1, 0, 0, ...: rows with and without the pair
						}
						tp := []tensor.LowRankPair{{A: at, B: bt}}
						dp := []tensor.LowRankPair{{A: c.a[0], B: c.b[0]}}
						if !bytes.Equal(tensor.LowRankGather(c.y, c.x, tp, ids).Bytes(), tensor.LowRankGather(c.y, c.x, dp, ids).Bytes()) {
							t.Fatal("LowRankGather: transposed operands differ from the dense ones")
						}
					}
					if portable {
						withPortable(body)
					} else {
						body()
					}
				})
			}
		}
	}
}

// TestLowRankComposed: the composition other backends get agrees with
// the kernel to within one rounding.
func TestLowRankComposed(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	c := newLRCase(4, 300, 50, []int{16}, tensor.Float32, tensor.Float32, 9)
	got := tensor.LowRank(c.y, c.x, c.a[0], c.b[0]).Float32s()
	t32 := tensor.Matmul(tensor.Matmul(c.x, tensor.Transpose(c.a[0])), tensor.Transpose(c.b[0]))
	comp := tensor.Add(c.y, t32).Float32s()
	want, mag := c.ref(make([]int, 4))
	for i := range got {
		if d := math.Abs(float64(got[i] - comp[i])); d > 1e-5*mag[i]+1e-6*math.Abs(want[i]) {
			t.Fatalf("[%d]: kernel %v, composed %v", i, got[i], comp[i])
		}
	}
}

func TestLowRankErrors(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	c := newLRCase(2, 8, 6, []int{3}, tensor.Float32, tensor.Float32, 1)
	fzPanicErr(t, func() { tensor.LowRank(c.y, c.x, c.b[0], c.a[0]) })
	fzPanicErr(t, func() { tensor.LowRank(c.x, c.y, c.a[0], c.b[0]) })
	fzPanicErr(t, func() { tensor.LowRankGather(c.y, c.x, c.pairs(), []int{0}) })
	fzPanicErr(t, func() { tensor.LowRankGather(c.y, c.x, c.pairs(), []int{0, 1}) })
	fzNoLeak(t, func() {
		tensor.LowRankGather(c.y, c.x, c.pairs(), []int{-1, 0}).Free()
	})
}

// BenchmarkLowRankDecode is one decode token's low-rank terms on a
// 1B-shaped Llama (bfloat16 activations and pairs, rank 16, one row,
// sixteen layers; the seven projections' shapes, A and B as the transposed views
// lora passes): GB/s of pair bytes read, per CPU second of the process.
func BenchmarkLowRankDecode(b *testing.B) {
	shapes := [][2]int{{2048, 2048}, {2048, 512}, {2048, 512}, {2048, 2048}, {2048, 8192}, {2048, 8192}, {8192, 2048}}
	type op struct {
		x, y, a, bt *tensor.Array
	}
	var ops []op
	bytes := 0
	// sixteen layers' worth (~22 MB, more than the caches hold): each
	// token reads its pairs from memory, as in a model's decode step
	for i := range 16 * len(shapes) {
		s := shapes[i%len(shapes)]
		c := newLRCase(1, s[0], s[1], []int{16}, tensor.BFloat16, tensor.BFloat16, uint32(40+i))
		bt := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.b[0])))
		at := tensor.Transpose(tensor.Contiguous(tensor.Transpose(c.a[0])))
		ops = append(ops, op{c.x, c.y, at, bt})
		bytes += 2 * 16 * (s[0] + s[1])
	}
	b.ResetTimer()
	c0 := lrCPUTime()
	for b.Loop() {
		for _, o := range ops {
			tensor.Free(tensor.LowRank(o.y, o.x, o.a, o.bt))
		}
	}
	cpu := (lrCPUTime() - c0).Seconds()
	b.ReportMetric(float64(bytes)*float64(b.N)/cpu/1e9, "GB/cpu-s")
	b.ReportMetric(cpu/float64(b.N)*1e3, "cpu-ms/token")
}
