package backendtest

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/mlxgo/mlxgo/tensor"
)

// ---- reductions ----

type reduceSpec struct {
	name string
	f    func(*tensor.Array, []int, bool) *tensor.Array
	init float64
	acc  func(acc, x float64) float64
	fin  func(v float64, n int) float64 // nil: none
	out  func(tensor.DType) tensor.DType
	g    gen
}

var reduceSpecs = []reduceSpec{
	{"Sum", tensor.Sum, 0, func(a, x float64) float64 { return a + x }, nil, sameOut, uni(-2, 2)},
	{"Mean", tensor.Mean, 0, func(a, x float64) float64 { return a + x }, func(v float64, n int) float64 { return v / float64(n) }, floatOut, uni(-2, 2)},
	{"Prod", tensor.Prod, 1, func(a, x float64) float64 { return a * x }, nil, sameOut, uni(0.6, 1.5)},
	{"Max", tensor.Max, math.Inf(-1), math.Max, nil, sameOut, uni(-2, 2)},
	{"Min", tensor.Min, math.Inf(1), math.Min, nil, sameOut, uni(-2, 2)},
	{"LogSumExp", tensor.LogSumExp, 0, func(a, x float64) float64 { return a + math.Exp(x) }, func(v float64, _ int) float64 { return math.Log(v) }, floatOut, uni(-3, 3)},
}

type axesCase struct {
	axes []int
	keep bool
}

func (a axesCase) String() string {
	k := ""
	if a.keep {
		k = ",keep"
	}
	if a.axes == nil {
		return "all" + k
	}
	return fmt.Sprint(a.axes) + k
}

// reduceWant is the reference of a reduction.
func reduceWant(sp reduceSpec, av []float64, shape []int, axes []int, keep bool, dt tensor.DType) ([]float64, []int) {
	ax := normAxesRef(axes, len(shape))
	want, ws := reduceRef(av, shape, ax, keep, sp.init, sp.acc)
	n := 1
	for _, a := range ax {
		n *= shape[a]
	}
	if sp.fin != nil {
		for i := range want {
			want[i] = sp.fin(want[i], n)
		}
	}
	if !dt.IsFloat() && sp.out(dt) == dt {
		for i := range want {
			want[i] = float64(wrapInt(int64(want[i]), dt))
		}
	}
	return want, ws
}

// reduceTol scales the elementwise tolerance by the number of terms for sums.
func reduceTol(sp reduceSpec, dt tensor.DType, n int) tol {
	t := tolFor(dt, sp.name == "LogSumExp" || sp.name == "Prod")
	if sp.name == "Sum" || sp.name == "Mean" {
		// terms in [-2, 2] summed in float32: the absolute error after
		// cancellation is bounded by n·2·u(float32)
		t.atol = max(t.atol, 2*unitRoundoff(tensor.Float32)*float64(n))
	}
	return t
}

func reduceCases() []testCase {
	var cs []testCase
	shape := []int{3, 4, 5}
	axesList := []axesCase{{nil, false}, {[]int{1}, false}, {[]int{0, 2}, true}, {[]int{-1}, false}, {[]int{-1, 0}, false}, {nil, true}}
	for _, sp := range reduceSpecs {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for i, ax := range axesList {
				lay := dense
				if i%2 == 1 {
					lay = transposed
				}
				if i == 4 {
					lay = strided
				}
				cs = append(cs, testCase{fmt.Sprintf("%s/%s/%v/%s/%s", sp.name, dt, shape, ax, lay), func(c *checker) {
					a, av := c.in(shape, dt, sp.g, lay)
					want, ws := reduceWant(sp, av, shape, ax.axes, ax.keep, dt)
					n := numel(shape) / max(len(want), 1)
					c.check(sp.name, c.T(sp.f(a, ax.axes, ax.keep)), ws, sp.out(dt), want, reduceTol(sp, dt, n))
				}})
			}
		}
		if sp.name != "LogSumExp" {
			cs = append(cs, testCase{sp.name + "/int32", func(c *checker) {
				g := ints(-50, 50)
				if sp.name == "Prod" {
					g = ints(-3, 3)
				}
				a, av := c.in([]int{4, 6}, tensor.Int32, g, transposed)
				for _, ax := range []axesCase{{nil, false}, {[]int{0}, true}, {[]int{1}, false}} {
					want, ws := reduceWant(sp, av, []int{4, 6}, ax.axes, ax.keep, tensor.Int32)
					c.check(fmt.Sprintf("%s %s", sp.name, ax), c.T(sp.f(a, ax.axes, ax.keep)), ws, sp.out(tensor.Int32), want, tolFor(tensor.Float32, false))
				}
			}})
		}
		cs = append(cs, testCase{sp.name + "/float16/broadcast-view", func(c *checker) {
			a, av := c.in([]int{4, 3, 6}, tensor.Float16, sp.g, broadcast)
			want, ws := reduceWant(sp, av, []int{4, 3, 6}, []int{0, 2}, false, tensor.Float16)
			c.check(sp.name, c.T(sp.f(a, []int{0, 2}, false)), ws, tensor.Float16, want, reduceTol(sp, tensor.Float16, 24))
		}})
	}
	for _, sp := range []reduceSpec{reduceSpecs[0], reduceSpecs[2]} {
		cs = append(cs, testCase{sp.name + "/empty", func(c *checker) {
			a := c.T(tensor.Zeros([]int{3, 0}, tensor.Float32))
			c.check(sp.name+" over empty axis", c.T(sp.f(a, []int{1}, false)), []int{3}, tensor.Float32, []float64{sp.init, sp.init, sp.init}, tol{})
			c.check(sp.name+" keeping empty axis", c.T(sp.f(a, []int{0}, true)), []int{1, 0}, tensor.Float32, nil, tol{})
		}})
	}
	for _, dt := range []tensor.DType{tensor.Bool, tensor.Float32, tensor.Int32} {
		cs = append(cs, testCase{"Any+All/" + dt.String(), func(c *checker) {
			// rows: mixed, all zero, all non-zero
			av := []float64{0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}
			if dt != tensor.Bool {
				av = []float64{0, 2, 0, 0, 0, 0, 0, 0, -3, 1, 5, 7}
			}
			a := c.arr(av, []int{3, 4}, dt)
			c.check("Any rows", c.T(tensor.Any(a, []int{1}, false)), []int{3}, tensor.Bool, []float64{1, 0, 1}, tol{})
			c.check("All rows", c.T(tensor.All(a, []int{-1}, true)), []int{3, 1}, tensor.Bool, []float64{0, 0, 1}, tol{})
			c.check("Any all", c.T(tensor.Any(a, nil, false)), []int{}, tensor.Bool, []float64{1}, tol{})
			c.check("All all", c.T(tensor.All(a, nil, false)), []int{}, tensor.Bool, []float64{0}, tol{})
			at := c.T(tensor.Transpose(a))
			c.check("Any cols (transposed)", c.T(tensor.Any(at, []int{1}, false)), []int{4}, tensor.Bool, []float64{1, 1, 1, 1}, tol{})
			c.check("All cols (transposed)", c.T(tensor.All(at, []int{1}, false)), []int{4}, tensor.Bool, []float64{0, 0, 0, 0}, tol{})
			e := c.T(tensor.Zeros([]int{2, 0}, dt))
			c.check("Any empty", c.T(tensor.Any(e, []int{1}, false)), []int{2}, tensor.Bool, []float64{0, 0}, tol{})
			c.check("All empty", c.T(tensor.All(e, []int{1}, false)), []int{2}, tensor.Bool, []float64{1, 1}, tol{})
		}})
	}
	cs = append(cs,
		testCase{"Sum/float32/1<<20", func(c *checker) {
			n := 1 << 20
			a, av := c.in([]int{n}, tensor.Float32, uni(0, 1), dense)
			s := 0.0
			for _, x := range av {
				s += x
			}
			c.check("Sum", c.T(tensor.Sum(a, nil, false)), []int{}, tensor.Float32, []float64{s}, tol{1e-5, 0})
			m := c.T(tensor.Reshape(a, 1024, 1024))
			rows, _ := reduceRef(av, []int{1024, 1024}, []int{0}, false, 0, func(acc, x float64) float64 { return acc + x })
			c.check("Sum axis 0 of 1024×1024", c.T(tensor.Sum(m, []int{0}, false)), []int{1024}, tensor.Float32, rows, tol{1e-5, 0})
			c.check("Mean", c.T(tensor.Mean(a, nil, false)), []int{}, tensor.Float32, []float64{s / float64(n)}, tol{1e-5, 0})
		}},
		testCase{"Sum/bfloat16/1<<16", func(c *checker) {
			n := 1 << 16
			a, av := c.in([]int{n}, tensor.BFloat16, uni(0, 1), dense)
			s := 0.0
			for _, x := range av {
				s += x
			}
			c.check("Sum", c.T(tensor.Sum(a, nil, false)), []int{}, tensor.BFloat16, []float64{s}, tol{1e-2, 0})
		}},
		testCase{"LogSumExp/stability", func(c *checker) {
			av := []float64{1000, 1000, 999, -1000, -1000, -1001, math.Inf(-1), math.Inf(-1), math.Inf(-1)}
			a := c.arr(av, []int{3, 3}, tensor.Float32)
			l := math.Log(2 + math.Exp(-1))
			want := []float64{1000 + l, -1000 + l, math.Inf(-1)}
			c.check("LogSumExp", c.T(tensor.LogSumExp(a, []int{1}, false)), []int{3}, tensor.Float32, want, tol{1e-6, 0})
		}},
		testCase{"Max+Min/int64-exact", func(c *checker) {
			// values float32 cannot tell apart: the reduction must stay in int64
			av := []float64{-(1 << 40), -(1 << 41), 5, 1<<40 + 1}
			a := c.arr(av, []int{2, 2}, tensor.Int64)
			c.check("Max", c.T(tensor.Max(a, []int{0}, false)), []int{2}, tensor.Int64, []float64{5, 1<<40 + 1}, tol{})
			c.check("Min", c.T(tensor.Min(a, nil, false)), []int{}, tensor.Int64, []float64{-(1 << 41)}, tol{})
		}},
	)
	return cs
}

// ---- Argmax / Argmin ----

func argReduceCases() []testCase {
	var cs []testCase
	for _, op := range []struct {
		name string
		f    func(*tensor.Array, int, bool) *tensor.Array
		less func(x, best float64) bool
	}{
		{"Argmax", tensor.Argmax, func(x, b float64) bool { return x > b }},
		{"Argmin", tensor.Argmin, func(x, b float64) bool { return x < b }},
	} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Uint8} {
			for _, axis := range []int{0, -1, 1} {
				for _, keep := range []bool{false, true} {
					if axis == 1 && keep {
						continue
					}
					shape := []int{4, 5, 6}
					cs = append(cs, testCase{fmt.Sprintf("%s/%s/axis%d/keep=%v", op.name, dt, axis, keep), func(c *checker) {
						// few distinct values, so ties are common: the first wins
						g := pick(-1, 0, 1, 2)
						if !dt.IsSigned() {
							g = pick(0, 1, 2, 3)
						}
						lay := dense
						if axis == 1 {
							lay = transposed
						}
						a, av := c.in(shape, dt, g, lay)
						ax := axis
						if ax < 0 {
							ax += len(shape)
						}
						var ws []int
						for d, n := range shape {
							if d != ax {
								ws = append(ws, n)
							} else if keep {
								ws = append(ws, 1)
							}
						}
						want := make([]float64, 0, numel(shape)/shape[ax])
						lanes(shape, ax, func(idx []int) {
							best := 0
							for k := 1; k < len(idx); k++ {
								if op.less(av[idx[k]], av[idx[best]]) {
									best = k
								}
							}
							want = append(want, float64(best))
						})
						c.check(op.name, c.T(op.f(a, axis, keep)), ws, tensor.Int32, want, tol{})
					}})
				}
			}
		}
	}
	return cs
}

// ---- Softmax / LogSoftmax ----

func softmaxRef(av []float64, shape []int, axis int, log bool) []float64 {
	out := make([]float64, len(av))
	lanes(shape, axis, func(idx []int) {
		m := math.Inf(-1)
		for _, i := range idx {
			m = math.Max(m, av[i])
		}
		s := 0.0
		for _, i := range idx {
			s += math.Exp(av[i] - m)
		}
		for _, i := range idx {
			if log {
				out[i] = av[i] - m - math.Log(s)
			} else {
				out[i] = math.Exp(av[i]-m) / s
			}
		}
	})
	return out
}

func softmaxCases() []testCase {
	var cs []testCase
	for _, log := range []bool{false, true} {
		name := "Softmax"
		f := tensor.Softmax
		if log {
			name, f = "LogSoftmax", tensor.LogSoftmax
		}
		for _, dt := range floatTypes {
			for _, axis := range []int{-1, 0, 1} {
				shape := []int{3, 7, 33}
				cs = append(cs, testCase{fmt.Sprintf("%s/%s/axis%d", name, dt, axis), func(c *checker) {
					lay := dense
					if axis == 0 {
						lay = transposed
					}
					a, av := c.in(shape, dt, uni(-6, 6), lay)
					ax := (axis + 3) % 3
					tl := tolFor(dt, true)
					if log {
						tl.atol = max(tl.atol, 4*unitRoundoff(dt)*8) // |log p| up to ~12
					}
					c.check(name, c.T(f(a, axis)), shape, dt, softmaxRef(av, shape, ax, log), tl)
				}})
			}
		}
	}
	cs = append(cs,
		testCase{"Softmax/masked-and-large", func(c *checker) {
			inf := math.Inf(-1)
			av := []float64{0, inf, 1, inf, 1000, 999, 1000, -1000}
			a := c.arr(av, []int{2, 4}, tensor.Float32)
			c.check("Softmax", c.T(tensor.Softmax(a, -1)), []int{2, 4}, tensor.Float32, softmaxRef(av, []int{2, 4}, 1, false), tol{1e-5, 1e-7})
		}},
		testCase{"Softmax/int32-input", func(c *checker) {
			av := []float64{1, 2, 3}
			a := c.arr(av, []int{3}, tensor.Int32)
			c.check("Softmax", c.T(tensor.Softmax(a, 0)), []int{3}, tensor.Float32, softmaxRef(av, []int{3}, 0, false), tol{1e-5, 1e-7})
		}},
	)
	return cs
}

// ---- Cumsum ----

func cumsumCases() []testCase {
	var cs []testCase
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
		for _, axis := range []int{0, 1, -1} {
			for _, rev := range []bool{false, true} {
				for _, incl := range []bool{true, false} {
					if axis == -1 && !(rev && !incl) && dt != tensor.Float32 {
						continue
					}
					shape := []int{5, 6, 7}
					cs = append(cs, testCase{fmt.Sprintf("Cumsum/%s/axis%d/reverse=%v/inclusive=%v", dt, axis, rev, incl), func(c *checker) {
						g := uni(-2, 2)
						if dt == tensor.Int32 {
							g = ints(-100, 100)
						}
						lay := dense
						if axis == 1 {
							lay = transposed
						}
						a, av := c.in(shape, dt, g, lay)
						ax := (axis + 3) % 3
						want := make([]float64, len(av))
						lanes(shape, ax, func(idx []int) {
							n := len(idx)
							for k := 0; k < n; k++ {
								s := 0.0
								for j := 0; j < n; j++ {
									var in bool
									if rev {
										in = j > k || (incl && j == k)
									} else {
										in = j < k || (incl && j == k)
									}
									if in {
										s += av[idx[j]]
									}
								}
								want[idx[k]] = s
							}
						})
						tl := tolFor(dt, false)
						tl.atol = max(tl.atol, 4*unitRoundoff(dt)*2*float64(shape[ax]))
						c.check("Cumsum", c.T(tensor.Cumsum(a, axis, rev, incl)), shape, dt, want, tl)
					}})
				}
			}
		}
	}
	return cs
}

// ---- Sort, Argsort, Argpartition, TopK ----

func sortCases() []testCase {
	var cs []testCase
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Uint32} {
		for _, axis := range []int{-1, 0} {
			shape := []int{6, 37}
			cs = append(cs, testCase{fmt.Sprintf("Sort+Argsort/%s/axis%d", dt, axis), func(c *checker) {
				g := gen(pick(-3, -1, 0, 0.5, 2, 7))
				if dt == tensor.Uint32 {
					g = ints(0, 4)
				}
				lay := dense
				if axis == 0 {
					lay = transposed
				}
				a, av := c.in(shape, dt, g, lay)
				ax := (axis + 2) % 2
				sorted := make([]float64, len(av))
				order := make([]float64, len(av))
				lanes(shape, ax, func(idx []int) {
					perm := make([]int, len(idx))
					for k := range perm {
						perm[k] = k
					}
					sort.SliceStable(perm, func(i, j int) bool { return av[idx[perm[i]]] < av[idx[perm[j]]] })
					for k, p := range perm {
						sorted[idx[k]] = av[idx[p]]
						order[idx[k]] = float64(p)
					}
				})
				c.check("Sort", c.T(tensor.Sort(a, axis)), shape, dt, sorted, tol{})
				c.check("Argsort (stable)", c.T(tensor.Argsort(a, axis)), shape, tensor.Int32, order, tol{})
			}})
		}
	}
	cs = append(cs,
		testCase{"Sort/NaN-last", func(c *checker) {
			nan := math.NaN()
			av := []float64{3, nan, -1, math.Inf(1), nan, math.Inf(-1), 0}
			a := c.arr(av, []int{7}, tensor.Float32)
			c.check("Sort", c.T(tensor.Sort(a, 0)), []int{7}, tensor.Float32, []float64{math.Inf(-1), -1, 0, 3, math.Inf(1), nan, nan}, tol{})
			idx := c.T(tensor.Argsort(a, 0))
			got := idx.Int64s()
			if len(got) == 7 && !(got[0] == 5 && got[1] == 2 && got[2] == 6 && got[3] == 0 && got[4] == 3) {
				c.Errorf("Argsort with NaN = %v, want [5 2 6 0 3 (1 4)]", got)
			}
		}},
		testCase{"Sort/empty-and-single", func(c *checker) {
			e := c.T(tensor.Zeros([]int{0, 3}, tensor.Float32))
			c.check("Sort empty", c.T(tensor.Sort(e, 0)), []int{0, 3}, tensor.Float32, nil, tol{})
			s := c.arr([]float64{4, 2}, []int{2, 1}, tensor.Float32)
			c.check("Sort size-1 axis", c.T(tensor.Sort(s, 1)), []int{2, 1}, tensor.Float32, []float64{4, 2}, tol{})
		}},
	)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Int32, tensor.BFloat16} {
		for _, kth := range []int{0, 5, -1, 16} {
			for _, axis := range []int{-1, 0} {
				shape := []int{4, 17}
				if axis == 0 {
					shape = []int{17, 4}
				}
				cs = append(cs, testCase{fmt.Sprintf("Argpartition/%s/kth%d/axis%d", dt, kth, axis), func(c *checker) {
					g := gen(uni(-5, 5))
					if dt != tensor.Float32 {
						g = ints(-4, 4) // ties
					}
					a, av := c.in(shape, dt, g, dense)
					ax := (axis + 2) % 2
					p := c.T(tensor.Argpartition(a, kth, axis))
					if !slices.Equal(p.Shape(), shape) || p.DType() != tensor.Int32 {
						c.Errorf("Argpartition: %s%v, want int32%v", p.DType(), p.Shape(), shape)
						return
					}
					pv := p.Int64s()
					k := kth
					if k < 0 {
						k += shape[ax]
					}
					lanes(shape, ax, func(idx []int) {
						n := len(idx)
						seen := make([]bool, n)
						vals := make([]float64, n)
						for j := 0; j < n; j++ {
							q := pv[idx[j]]
							if q < 0 || int(q) >= n || seen[q] {
								c.Errorf("Argpartition lane %v: indices are not a permutation: %v", idx[0], pv)
								return
							}
							seen[q] = true
							// the element q along the axis of this lane
							vals[j] = av[idx[q]]
						}
						ref := make([]float64, n)
						for j := range ref {
							ref[j] = av[idx[j]]
						}
						slices.Sort(ref)
						if vals[k] != ref[k] {
							c.Errorf("Argpartition: element at kth=%d is %v, want %v (lane from %d)", k, vals[k], ref[k], idx[0])
						}
						for j := 0; j < n; j++ {
							if (j < k && vals[j] > vals[k]) || (j > k && vals[j] < vals[k]) {
								c.Errorf("Argpartition: position %d holds %v, kth (%d) holds %v", j, vals[j], k, vals[k])
								return
							}
						}
					})
				}})
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
		for _, k := range []int{1, 3, 10} {
			cs = append(cs, testCase{fmt.Sprintf("TopK/%s/k%d", dt, k), func(c *checker) {
				shape := []int{3, 10}
				a, av := c.in(shape, dt, pick(-1, 0, 1, 2, 3), transposed)
				vals, idx := tensor.TopK(a, k, -1)
				c.T(vals)
				c.T(idx)
				var wv, wi []float64
				for r := 0; r < 3; r++ {
					perm := make([]int, 10)
					for j := range perm {
						perm[j] = j
					}
					sort.SliceStable(perm, func(i, j int) bool { return av[r*10+perm[i]] > av[r*10+perm[j]] })
					for j := 0; j < k; j++ {
						wv = append(wv, av[r*10+perm[j]])
						wi = append(wi, float64(perm[j]))
					}
				}
				c.check("TopK values", vals, []int{3, k}, dt, wv, tol{})
				c.check("TopK indices", idx, []int{3, k}, tensor.Int32, wi, tol{})
			}})
		}
	}
	return cs
}
