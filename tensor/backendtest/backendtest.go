// Package backendtest is the conformance suite every tensor.Backend must
// pass. It drives a backend only through the public tensor API and checks
// each operation against a float64 reference written here with plain loops
// over flat data, so a new backend (the CPU kernels, MLX through mlx-c) is
// held to one definition of every op's semantics.
//
// A backend's package runs it from a test:
//
//	func TestConformance(t *testing.T) { backendtest.Run(t, cpu.Default) }
//
// Inputs are random, drawn from a seeded math/rand/v2 source. The seed is
// logged and repeated in every failure; set MLXGO_TEST_SEED to replay one.
package backendtest

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// SeedEnv names the environment variable that fixes the suite's seed, so a
// failure seen once (the seed is in its message) can be replayed.
const SeedEnv = "MLXGO_TEST_SEED"

// testCase is one op × dtype × shape check. run builds its inputs with the
// checker helpers (which free them afterwards) and reports through it.
type testCase struct {
	name string
	run  func(c *checker)
}

// family groups the cases of one op family under one t.Run.
type family struct {
	name  string
	cases func() []testCase
}

func families() []family {
	return []family{
		{"creation", creationCases},
		{"unary", unaryCases},
		{"binary", binaryCases},
		{"scalar", scalarCases},
		{"where", whereCases},
		{"astype", asTypeCases},
		{"reduce", reduceCases},
		{"argreduce", argReduceCases},
		{"softmax", softmaxCases},
		{"cumsum", cumsumCases},
		{"sort", sortCases},
		{"matmul", matmulCases},
		{"indexing", indexingCases},
		{"layout", layoutCases},
		{"norm", normCases},
		{"rope", ropeCases},
		{"sdpa", sdpaCases},
		{"paged", pagedCases},
		{"quant", quantCases},
		{"random", randomCases},
		{"scale", scaleCases},
		{"errors", errorCases},
	}
}

// Run checks be against the suite's references, one subtest per case,
// grouped by op family. It makes be the default backend while it runs (the
// creation functions use it) and restores the previous default after.
func Run(t *testing.T, be tensor.Backend) {
	seed := seedFromEnv(t)
	var prev tensor.Backend
	if tensor.Try(func() { prev = tensor.Default() }) != nil {
		prev = nil
	}
	tensor.SetDefault(be)
	defer tensor.SetDefault(prev)

	fams := families()
	built := make([][]testCase, len(fams))
	total, ran, failed := 0, 0, 0
	for i, f := range fams {
		built[i] = f.cases()
		total += len(built[i])
	}
	t.Logf("running %d cases in %d families on backend %q (seed %d)", total, len(fams), be.Name(), seed)
	for i, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			for _, tc := range built[i] {
				if !t.Run(tc.name, func(t *testing.T) { ran++; runCase(t, be, seed, f.name, tc) }) {
					failed++
				}
			}
		})
	}
	t.Logf("%d cases on backend %q, %d run, %d failed (seed %d; set %s=%d to replay)",
		total, be.Name(), ran, failed, seed, SeedEnv, seed)
}

func seedFromEnv(t *testing.T) uint64 {
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// reporter is the part of *testing.T a case reports through; the suite's
// own tests substitute a recorder to check that broken backends fail.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

func runCase(t reporter, be tensor.Backend, seed uint64, fam string, tc testCase) {
	h := fnv.New64a()
	h.Write([]byte(fam + "/" + tc.name))
	c := &checker{t: t, be: be, seed: seed, rng: rand.New(rand.NewPCG(seed, h.Sum64()))}
	before := tensor.LiveArrays()
	err := tensor.Try(func() { tc.run(c) })
	c.freeAll()
	if err != nil {
		msg := err.Error()
		if len(msg) > 1500 {
			msg = msg[:1500] + " …"
		}
		t.Errorf("seed %d: case %s/%s failed: %s", seed, fam, tc.name, msg)
	}
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("seed %d: case %s/%s leaked %d arrays (LiveArrays %d before, %d after)",
			seed, fam, tc.name, after-before, before, after)
	}
}

// checker is a running case: its random source, the arrays it made (freed when
// the case ends, so a failing op does not also report leaks of the
// case's own inputs), and failure reporting that names the seed.
type checker struct {
	t     reporter
	be    tensor.Backend
	seed  uint64
	rng   *rand.Rand
	owned []*tensor.Array
}

// T tracks a, made by the case, so it is freed when the case ends; it
// returns a for chaining.
func (c *checker) T(a *tensor.Array) *tensor.Array {
	c.owned = append(c.owned, a)
	return a
}

func (c *checker) freeAll() {
	for i := len(c.owned) - 1; i >= 0; i-- {
		c.owned[i].Free()
	}
	c.owned = nil
}

// Errorf reports a failure with the seed.
func (c *checker) Errorf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("seed %d: %s", c.seed, fmt.Sprintf(format, args...))
}

// ---- random inputs ----

// gen draws one value.
type gen func(r *rand.Rand) float64

func uni(lo, hi float64) gen {
	return func(r *rand.Rand) float64 { return lo + (hi-lo)*r.Float64() }
}

// ints draws integers in [lo, hi].
func ints(lo, hi int) gen {
	return func(r *rand.Rand) float64 { return float64(lo + r.IntN(hi-lo+1)) }
}

// awayFromZero draws values with lo ≤ |v| < hi and a random sign.
func awayFromZero(lo, hi float64) gen {
	return func(r *rand.Rand) float64 {
		v := lo + (hi-lo)*r.Float64()
		if r.IntN(2) == 0 {
			return -v
		}
		return v
	}
}

// pick draws from a fixed set (ties, special values).
func pick(vs ...float64) gen {
	return func(r *rand.Rand) float64 { return vs[r.IntN(len(vs))] }
}

// layout is how an input array is laid out in memory; every layout holds
// the same logical values, so the reference does not care.
type layout int

const (
	dense      layout = iota
	transposed        // a SwapAxes view of the last two axes
	strided           // a step-2 slice of a larger array
	broadcast         // a stride-0 view along the first non-1 axis
)

func (l layout) String() string {
	return [...]string{"dense", "T", "step", "bcast"}[l]
}

// in makes an input of shape and dt with values from g in layout lay and
// returns it with its logical values (row-major, rounded to dt).
func (c *checker) in(shape []int, dt tensor.DType, g gen, lay layout) (*tensor.Array, []float64) {
	n := numel(shape)
	switch {
	case lay == transposed && len(shape) >= 2:
		nd := len(shape)
		bs := slices.Clone(shape)
		bs[nd-1], bs[nd-2] = bs[nd-2], bs[nd-1]
		base, bv := c.in(bs, dt, g, dense)
		v := c.T(tensor.SwapAxes(base, -1, -2))
		return v, transposeRef(bv, bs, swapPerm(nd, nd-2, nd-1))
	case (lay == strided || lay == transposed) && len(shape) >= 1:
		nd := len(shape)
		bs := slices.Clone(shape)
		bs[nd-1] = 2*shape[nd-1] + 1
		base, bv := c.in(bs, dt, g, dense)
		start := make([]int, nd)
		step := make([]int, nd)
		for i := range step {
			step[i] = 1
		}
		start[nd-1], step[nd-1] = 1, 2
		v := c.T(tensor.Slice(base, start, bs, step))
		out := make([]float64, n)
		for i := range out {
			idx := unravel(i, shape)
			idx[nd-1] = 1 + 2*idx[nd-1]
			out[i] = bv[ravel(idx, bs)]
		}
		return v, out
	case lay == broadcast && n > 0:
		ax := -1
		for i, d := range shape {
			if d > 1 {
				ax = i
				break
			}
		}
		if ax < 0 {
			return c.in(shape, dt, g, dense)
		}
		bs := slices.Clone(shape)
		bs[ax] = 1
		base, bv := c.in(bs, dt, g, dense)
		v := c.T(tensor.BroadcastTo(base, shape...))
		out := make([]float64, n)
		for i := range out {
			out[i] = bv[bcastIndex(unravel(i, shape), bs)]
		}
		return v, out
	}
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = roundTo(g(c.rng), dt)
	}
	return c.arr(vals, shape, dt), vals
}

// arr makes a dense array holding vals (already representable in dt).
func (c *checker) arr(vals []float64, shape []int, dt tensor.DType) *tensor.Array {
	return c.T(tensor.FromBytesOn(c.be, encodeVals(vals, dt), shape, dt, false))
}

// vals reads a back as float64.
func vals(a *tensor.Array) []float64 { return a.Float64s() }

// ---- comparison ----

// tol bounds |got-want| ≤ atol + rtol·|want| for floats; integer and bool
// results are always compared exactly.
type tol struct{ rtol, atol float64 }

// tolFor is the tolerance of elementwise results in dt; loose widens it
// for transcendental functions, whose float32 implementations may be
// approximations.
func tolFor(dt tensor.DType, loose bool) tol {
	var t tol
	switch dt {
	case tensor.Float32:
		t = tol{2e-5, 1e-6}
		if loose {
			t = tol{1e-4, 1e-5}
		}
	case tensor.Float16:
		t = tol{2e-3, 1e-4}
		if loose {
			t = tol{4e-3, 1e-3}
		}
	case tensor.BFloat16:
		t = tol{1e-2, 1e-3}
		if loose {
			t = tol{2e-2, 4e-3}
		}
	}
	return t
}

// check compares got with the reference: shape, dtype and every value.
// NaN must match NaN and infinities must match exactly.
func (c *checker) check(what string, got *tensor.Array, shape []int, dt tensor.DType, want []float64, tl tol) bool {
	c.t.Helper()
	if !c.checkLayout(what, got, shape, dt) {
		return false
	}
	g := vals(got)
	return c.compare(what, g, shape, want, dt.IsFloat(), tl)
}

// checkLayout reports (and records as an error) a nil result or one whose
// shape or dtype is not the expected one.
func (c *checker) checkLayout(what string, got *tensor.Array, shape []int, dt tensor.DType) bool {
	c.t.Helper()
	switch {
	case got == nil:
		c.Errorf("%s: nil result", what)
	case !slices.Equal(got.Shape(), shape):
		c.Errorf("%s: shape %v, want %v", what, got.Shape(), shape)
	case got.DType() != dt:
		c.Errorf("%s: dtype %s, want %s", what, got.DType(), dt)
	default:
		return true
	}
	return false
}

func (c *checker) compare(what string, g []float64, shape []int, want []float64, isFloat bool, tl tol) bool {
	c.t.Helper()
	if len(g) != len(want) {
		c.Errorf("%s: %d values, want %d", what, len(g), len(want))
		return false
	}
	bad := 0
	var lines []string
	worst := 0.0
	for i := range want {
		w, x := want[i], g[i]
		ok := true
		switch {
		case !isFloat:
			ok = w == x
		case isNaN(w) || isNaN(x):
			ok = isNaN(w) && isNaN(x)
		case isInf(w) || isInf(x):
			ok = w == x
		default:
			d := abs(w - x)
			ok = d <= tl.atol+tl.rtol*abs(w)
			worst = max(worst, d/(tl.atol+tl.rtol*abs(w)))
		}
		if !ok {
			bad++
			if len(lines) < 6 {
				lines = append(lines, fmt.Sprintf("  at %v: got %v, want %v", unravel(i, shape), x, w))
			}
		}
	}
	if bad > 0 {
		c.Errorf("%s: %d of %d values differ (rtol %g, atol %g):\n%s", what, bad, len(want), tl.rtol, tl.atol, strings.Join(lines, "\n"))
		return false
	}
	return true
}

// checkErr asserts that f panics with an *tensor.Error wrapping sentinel
// and that tensor.Try hands it back.
func (c *checker) checkErr(what string, sentinel error, f func()) {
	c.t.Helper()
	err := tensor.Try(f)
	if err == nil {
		c.Errorf("%s: no error", what)
		return
	}
	te, ok := err.(*tensor.Error)
	if !ok {
		c.Errorf("%s: error %T (%v), want *tensor.Error", what, err, err)
		return
	}
	if !isErr(te, sentinel) {
		c.Errorf("%s: error %v, want one wrapping %v", what, te, sentinel)
	}
	// the panic value itself must be the *tensor.Error
	func() {
		defer func() {
			r := recover()
			if _, ok := r.(*tensor.Error); !ok {
				c.Errorf("%s: panicked with %T, want *tensor.Error", what, r)
			}
		}()
		f()
	}()
}
