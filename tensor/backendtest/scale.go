package backendtest

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/mlxgo/mlxgo/tensor"
)

// Sizes that expose the seams of optimised kernels: SIMD tails (lengths
// around multiples of 8, 16 and 32), cache blocks (matmul's K, M and N
// blocks), parallel chunking (arrays of a million elements, vocabulary-
// sized rows) and split-key attention (thousands of keys, some blocks fully
// masked). Each case sweeps many sizes and names the failing one.

var tails = []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 255, 257}

func scaleCases() []testCase {
	var cs []testCase
	// elementwise tails, contiguous and strided, in every float type
	for _, dt := range floatTypes {
		for _, lay := range []layout{dense, strided} {
			cs = append(cs, testCase{fmt.Sprintf("tails/elementwise/%s/%s", dt, lay), func(c *checker) {
				for _, n := range tails {
					a, av := c.in([]int{n}, dt, uni(-3, 3), lay)
					b, bv := c.in([]int{n}, dt, uni(-3, 3), dense)
					sum, prod, ex, si := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
					for i := range av {
						sum[i], prod[i] = av[i]+bv[i], av[i]*bv[i]
						ex[i], si[i] = math.Exp(av[i]), av[i]*sigmoid(av[i])
					}
					ok := c.check(fmt.Sprintf("Add n=%d", n), c.T(tensor.Add(a, b)), []int{n}, dt, sum, tolFor(dt, false)) &&
						c.check(fmt.Sprintf("Mul n=%d", n), c.T(tensor.Mul(a, b)), []int{n}, dt, prod, tolFor(dt, false)) &&
						c.check(fmt.Sprintf("Exp n=%d", n), c.T(tensor.Exp(a)), []int{n}, dt, ex, tolFor(dt, true)) &&
						c.check(fmt.Sprintf("Silu n=%d", n), c.T(tensor.Silu(a)), []int{n}, dt, si, tolFor(dt, true)) &&
						c.check(fmt.Sprintf("AsType float32 n=%d", n), c.T(tensor.AsType(a, tensor.Float32)), []int{n}, tensor.Float32, av, tol{})
					if !ok {
						return
					}
				}
			}})
		}
	}
	// row reductions and row-wise layers on rows of every tail length
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		cs = append(cs, testCase{"tails/rows/" + dt.String(), func(c *checker) {
			for _, n := range tails {
				shape := []int{3, n}
				a, av := c.in(shape, dt, uni(-3, 3), dense)
				sum, ss := reduceRef(av, shape, []int{1}, false, 0, func(acc, x float64) float64 { return acc + x })
				mx, _ := reduceRef(av, shape, []int{1}, false, math.Inf(-1), math.Max)
				am := make([]float64, 0, 3)
				lanes(shape, 1, func(idx []int) {
					best := 0
					for k := range idx {
						if av[idx[k]] > av[idx[best]] {
							best = k
						}
					}
					am = append(am, float64(best))
				})
				t := tolFor(dt, false)
				t.atol = max(t.atol, 8*unitRoundoff(tensor.Float32)*float64(n))
				ok := c.check(fmt.Sprintf("Sum n=%d", n), c.T(tensor.Sum(a, []int{1}, false)), ss, dt, sum, t) &&
					c.check(fmt.Sprintf("Max n=%d", n), c.T(tensor.Max(a, []int{1}, false)), ss, dt, mx, tol{}) &&
					c.check(fmt.Sprintf("Argmax n=%d", n), c.T(tensor.Argmax(a, 1, false)), ss, tensor.Int32, am, tol{}) &&
					c.check(fmt.Sprintf("Softmax n=%d", n), c.T(tensor.Softmax(a, 1)), shape, dt, softmaxRef(av, shape, 1, false), tolFor(dt, true))
				if ok && n%2 == 0 {
					want := make([]float64, len(av))
					lanes(shape, 1, func(idx []int) {
						ms := 0.0
						for _, i := range idx {
							ms += av[i] * av[i]
						}
						r := 1 / math.Sqrt(ms/float64(n)+1e-5)
						for _, i := range idx {
							want[i] = av[i] * r
						}
					})
					tl := tolFor(dt, true)
					tl.rtol *= 2
					ok = c.check(fmt.Sprintf("RMSNorm n=%d", n), c.T(tensor.RMSNorm(a, nil, 1e-5)), shape, dt, want, tl)
				}
				if !ok {
					return
				}
			}
		}})
	}
	// matmul: every combination of tails around the 8×32 micro-tile
	for _, dt := range floatTypes {
		for _, lay := range []layout{dense, transposed} {
			cs = append(cs, testCase{fmt.Sprintf("tails/matmul/%s/b-%s", dt, lay), func(c *checker) {
				for _, m := range []int{1, 2, 7, 8, 9, 17} {
					for _, n := range []int{1, 5, 31, 32, 33, 65} {
						for _, k := range []int{1, 3, 16, 17, 64, 100} {
							a, av := c.in([]int{m, k}, dt, uni(-1, 1), dense)
							b, bv := c.in([]int{k, n}, dt, uni(-1, 1), lay)
							want, scale, shape := matmulRef(av, []int{m, k}, bv, []int{k, n})
							rtol, ks := matmulTol(dt, k)
							if !c.checkScaled(fmt.Sprintf("Matmul %dx%dx%d", m, k, n), c.T(tensor.Matmul(a, b)), shape, dt, want, scale, rtol, ks) {
								return
							}
						}
					}
				}
			}})
		}
	}
	type big struct {
		as, bs []int
		la, lb layout
		dt     tensor.DType
	}
	for _, bg := range []big{
		{[]int{130, 300}, []int{300, 530}, dense, transposed, tensor.Float32},
		{[]int{70, 520}, []int{520, 97}, transposed, dense, tensor.BFloat16},
		{[]int{1, 4096}, []int{4096, 300}, dense, transposed, tensor.BFloat16},
		{[]int{1, 4096}, []int{4096, 300}, dense, dense, tensor.Float32},
		{[]int{3, 1000}, []int{1000, 129}, dense, transposed, tensor.Float16},
		{[]int{16, 9, 40}, []int{16, 40, 33}, dense, dense, tensor.Float32},
	} {
		cs = append(cs, testCase{fmt.Sprintf("blocks/matmul/%s/%v%s@%v%s", bg.dt, bg.as, bg.la, bg.bs, bg.lb), func(c *checker) {
			a, av := c.in(bg.as, bg.dt, uni(-1, 1), bg.la)
			b, bv := c.in(bg.bs, bg.dt, uni(-1, 1), bg.lb)
			want, scale, shape := matmulRef(av, bg.as, bv, bg.bs)
			rtol, ks := matmulTol(bg.dt, bg.as[len(bg.as)-1])
			c.checkScaled("Matmul", c.T(tensor.Matmul(a, b)), shape, bg.dt, want, scale, rtol, ks)
		}})
	}
	// quantized matmul: every bit width and group size over row counts,
	// output widths and depths that are not multiples of the kernels' tiles
	for _, bits := range tensor.QuantBitsSupported {
		for _, g := range tensor.QuantGroupsSupported {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				cs = append(cs, testCase{fmt.Sprintf("tails/QuantizedMatmul/%s/bits%d/group%d", dt, bits, g), func(c *checker) {
					for _, n := range []int{4, 13, 36} {
						for _, k := range []int{g, 3 * g} {
							qz, _, ok := c.quantize([]int{n, k}, dt, g, bits)
							if !ok {
								return
							}
							w := transposeRef(qz.w, []int{n, k}, []int{1, 0})
							mag := transposeRef(qz.mag, []int{n, k}, []int{1, 0})
							for _, m := range []int{1, 2, 5, 9} {
								x, xv := c.in([]int{m, k}, dt, uni(-1, 1), dense)
								want, scale, shape := qmmRef(xv, []int{m, k}, w, mag, []int{k, n})
								rtol, ks := qmmTol(dt, k)
								if !c.checkScaled(fmt.Sprintf("QuantizedMatmul m=%d n=%d k=%d", m, n, k), c.T(tensor.QuantizedMatmul(x, qz.wq, qz.s, qz.b, true, g, bits)), shape, dt, want, scale, rtol, ks) {
									return
								}
							}
						}
					}
					// not transposed: w is [K, N], packed along N
					qz, _, ok := c.quantize([]int{7, 2 * g}, dt, g, bits)
					if !ok {
						return
					}
					for _, m := range []int{1, 3} {
						x, xv := c.in([]int{m, 7}, dt, uni(-1, 1), dense)
						want, scale, shape := qmmRef(xv, []int{m, 7}, qz.w, qz.mag, []int{7, 2 * g})
						rtol, ks := qmmTol(dt, 7)
						if !c.checkScaled(fmt.Sprintf("QuantizedMatmul (w [K, N]) m=%d", m), c.T(tensor.QuantizedMatmul(x, qz.wq, qz.s, qz.b, false, g, bits)), shape, dt, want, scale, rtol, ks) {
							return
						}
					}
				}})
			}
		}
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		for _, m := range []int{1, 4, 33} {
			cs = append(cs, testCase{fmt.Sprintf("blocks/QuantizedMatmul/%s/m%d/2048x260/bits4/group64", dt, m), func(c *checker) {
				// decode (m=1) and prefill shapes of a Linear layer
				qz, _, ok := c.quantize([]int{260, 2048}, dt, 64, 4)
				if !ok {
					return
				}
				x, xv := c.in([]int{m, 2048}, dt, uni(-1, 1), dense)
				w := transposeRef(qz.w, []int{260, 2048}, []int{1, 0})
				mag := transposeRef(qz.mag, []int{260, 2048}, []int{1, 0})
				want, scale, shape := qmmRef(xv, []int{m, 2048}, w, mag, []int{2048, 260})
				rtol, ks := qmmTol(dt, 2048)
				c.checkScaled("QuantizedMatmul", c.T(tensor.QuantizedMatmul(x, qz.wq, qz.s, qz.b, true, 64, 4)), shape, dt, want, scale, rtol, ks)
			}})
		}
	}
	// a million elements: parallel chunks of elementwise ops over views
	cs = append(cs,
		testCase{"parallel/elementwise/1024x1031", func(c *checker) {
			shape := []int{1024, 1031}
			a, av := c.in(shape, tensor.Float32, uni(-3, 3), transposed)
			b, bv := c.in([]int{1031}, tensor.Float32, uni(-3, 3), dense)
			sum, s := binaryRef(binarySpecs[0], av, shape, bv, []int{1031}, tensor.Float32)
			c.check("Add", c.T(tensor.Add(a, b)), s, tensor.Float32, sum, tolFor(tensor.Float32, false))
			ex := make([]float64, len(av))
			for i, x := range av {
				ex[i] = math.Exp(x)
			}
			c.check("Exp", c.T(tensor.Exp(a)), shape, tensor.Float32, ex, tolFor(tensor.Float32, true))
			h := c.T(tensor.AsType(a, tensor.BFloat16))
			c.check("AsType bfloat16", h, shape, tensor.BFloat16, roundAll(av, tensor.BFloat16), tol{})
			colSum, css := reduceRef(av, shape, []int{0}, false, 0, func(acc, x float64) float64 { return acc + x })
			c.check("Sum axis 0", c.T(tensor.Sum(a, []int{0}, false)), css, tensor.Float32, colSum, tol{1e-5, 1e-4})
		}},
		testCase{"parallel/vocab-rows", func(c *checker) {
			// sampling over a 151936-token vocabulary
			const v = 151936
			shape := []int{2, v}
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				a, av := c.in(shape, dt, uni(-10, 10), dense)
				c.check("Softmax "+dt.String(), c.T(tensor.Softmax(a, -1)), shape, dt, softmaxRef(av, shape, 1, false), tolFor(dt, true))
				lse := make([]float64, 0, 2)
				am := make([]float64, 0, 2)
				lanes(shape, 1, func(idx []int) {
					m, best := math.Inf(-1), 0
					for k, i := range idx {
						if av[i] > m {
							m, best = av[i], k
						}
					}
					s := 0.0
					for _, i := range idx {
						s += math.Exp(av[i] - m)
					}
					lse = append(lse, m+math.Log(s))
					am = append(am, float64(best))
				})
				c.check("LogSumExp "+dt.String(), c.T(tensor.LogSumExp(a, []int{-1}, false)), []int{2}, dt, lse, tolFor(dt, true))
				c.check("Argmax "+dt.String(), c.T(tensor.Argmax(a, -1, false)), []int{2}, tensor.Int32, am, tol{})
				if dt != tensor.Float32 {
					continue
				}
				topV, topI := tensor.TopK(a, 40, -1)
				c.T(topV)
				c.T(topI)
				var wv, wi []float64
				lanes(shape, 1, func(ix []int) {
					perm := make([]int, len(ix))
					for k := range perm {
						perm[k] = k
					}
					sort.SliceStable(perm, func(i, j int) bool { return av[ix[perm[i]]] > av[ix[perm[j]]] })
					for _, p := range perm[:40] {
						wv = append(wv, av[ix[p]])
						wi = append(wi, float64(p))
					}
				})
				c.check("TopK values", topV, []int{2, 40}, dt, wv, tol{})
				c.check("TopK indices", topI, []int{2, 40}, tensor.Int32, wi, tol{})
				sorted := c.T(tensor.Sort(a, -1))
				ws := slices.Clone(av)
				slices.Sort(ws[:v])
				slices.Sort(ws[v:])
				c.check("Sort", sorted, shape, dt, ws, tol{})
				p := c.T(tensor.Softmax(a, -1))
				pv := vals(p)
				cum := make([]float64, len(pv))
				lanes(shape, 1, func(ix []int) {
					s := 0.0
					for _, i := range ix {
						s += pv[i]
						cum[i] = s
					}
				})
				c.check("Cumsum of probabilities", c.T(tensor.Cumsum(p, -1, false, true)), shape, dt, cum, tol{1e-4, 2e-4})
			}
		}},
		testCase{"parallel/embedding-gather", func(c *checker) {
			tbl, tv := c.in([]int{32000, 64}, tensor.BFloat16, uni(-1, 1), dense)
			ids, iv := c.in([]int{3, 100}, tensor.Int32, ints(0, 31999), dense)
			want, shape := takeRef(tv, []int{32000, 64}, iv, []int{3, 100}, 0)
			c.check("Take", c.T(tensor.Take(tbl, ids, 0)), shape, tensor.BFloat16, want, tol{})
		}},
		testCase{"parallel/RMSNorm-64x4096", func(c *checker) {
			shape := []int{64, 4096}
			x, xv := c.in(shape, tensor.BFloat16, uni(-3, 3), dense)
			w, wv := c.in([]int{4096}, tensor.BFloat16, uni(0.5, 1.5), dense)
			want := make([]float64, len(xv))
			lanes(shape, 1, func(idx []int) {
				ms := 0.0
				for _, i := range idx {
					ms += xv[i] * xv[i]
				}
				r := 1 / math.Sqrt(ms/4096+1e-6)
				for k, i := range idx {
					want[i] = xv[i] * r * wv[k]
				}
			})
			c.check("RMSNorm", c.T(tensor.RMSNorm(x, w, 1e-6)), shape, tensor.BFloat16, want, tol{2e-2, 4e-3})
		}},
		testCase{"parallel/RoPE-T200", func(c *checker) {
			rc := ropeCase{[]int{2, 4, 200, 64}, 64, false, 10000, 1, 100, nil, false}
			x, xv := c.in(rc.shape, tensor.Float32, uni(-2, 2), dense)
			want, mag := ropeRef(xv, rc.shape, rc, nil)
			c.checkRoPE(c.T(tensor.RoPE(x, tensor.RoPEOptions{Dims: 64, Base: 10000, Scale: 1, Offset: 100})), rc.shape, tensor.Float32, want, mag)
		}},
	)
	// attention over many keys: the key axis is split into chunks whose
	// partial softmaxes must merge exactly, including chunks with every key masked
	type longAttn struct {
		s    sdpaCase
		mask string
	}
	for _, la := range []longAttn{
		{sdpaCase{1, 2, 1, 1, 600, 64, 64, "none", nil, false, 0}, ""},
		{sdpaCase{1, 4, 2, 5, 700, 64, 32, "causal", nil, false, 0}, ""},
		{sdpaCase{1, 2, 1, 3, 600, 64, 64, "bool", []int{1, 1, 3, 600}, false, 0}, "first-half"},
		{sdpaCase{1, 2, 1, 40, 300, 32, 32, "causal", nil, true, 0}, ""},
		{sdpaCase{2, 8, 2, 1, 1000, 128, 128, "none", nil, false, 0}, ""},
		{sdpaCase{1, 2, 2, 2, 520, 16, 16, "bool", []int{1, 1, 2, 520}, false, 0}, "last-only"},
	} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			s := la.s
			cs = append(cs, testCase{fmt.Sprintf("long/SDPA/%s/%s/%s", dt, s, la.mask), func(c *checker) {
				q, qv := c.in([]int{s.b, s.hq, s.tq, s.d}, dt, uni(-1, 1), dense)
				k, kv := c.in([]int{s.b, s.hkv, s.tk, s.d}, dt, uni(-1, 1), dense)
				v, vv := c.in([]int{s.b, s.hkv, s.tk, s.dv}, dt, uni(-1, 1), dense)
				o := tensor.SDPAOptions{}
				scale := 1 / math.Sqrt(float64(s.d))
				keep := func(b, h, i, j int) bool { return true }
				add := func(b, h, i, j int) float64 { return 0 }
				switch s.mask {
				case "causal":
					o.MaskKind = tensor.MaskCausal
					keep = func(b, h, i, j int) bool { return j <= i+s.tk-s.tq }
				case "bool":
					mv := make([]float64, numel(s.maskShape))
					for i := range mv {
						idx := unravel(i, s.maskShape)
						qi, kj := idx[2], idx[3]
						switch la.mask {
						case "first-half": // row 0 sees only the second half; the others everything
							mv[i] = boolOf(qi != 0 || kj >= s.tk/2)
						case "last-only": // row 0 sees only the last key; row 1 nothing
							mv[i] = boolOf(qi == 0 && kj == s.tk-1)
						}
					}
					o.MaskKind, o.Mask = tensor.MaskArray, c.arr(mv, s.maskShape, tensor.Bool)
					keep = func(b, h, i, j int) bool { return mv[bcastIndex([]int{b, h, i, j}, s.maskShape)] != 0 }
				}
				c.checkSDPA(s, dt, q, k, v, o, qv, kv, vv, keep, add, scale)
			}})
		}
	}
	return cs
}
