package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// ewtLeak fails the test if it leaves more live arrays than it found.
func ewtLeak(t *testing.T) func() {
	t.Helper()
	before := tensor.LiveArrays()
	return func() {
		t.Helper()
		if after := tensor.LiveArrays(); after != before {
			t.Errorf("live arrays: %d before, %d after", before, after)
		}
	}
}

// ewtScope opens a scope closed (with a leak check) at the end of the test.
func ewtScope(t *testing.T) {
	t.Helper()
	done := ewtLeak(t)
	s := tensor.NewScope()
	t.Cleanup(func() { s.Close(); done() })
}

func ewtRand(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// ewtBcastIndex maps flat index i of shape out to the flat index of the
// broadcast operand of shape in.
func ewtBcastIndex(out, in []int, i int) int {
	off := len(out) - len(in)
	idx, mul := 0, 1
	for d := len(out) - 1; d >= 0; d-- {
		c := i % out[d]
		i /= out[d]
		if d >= off {
			if in[d-off] != 1 {
				idx += c * mul
			}
			mul *= in[d-off]
		}
	}
	return idx
}

func ewtSame(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		if math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, g, w)
		}
	}
}

func TestEwExpAccuracy(t *testing.T) {
	var xs []float32
	for x := float32(-110); x < 90; x += 0.000713 {
		xs = append(xs, x)
	}
	inline := make([]float32, len(xs))
	ewExpInto(inline, xs, 0)
	worst := 0
	for i, x := range xs {
		got := ewExp(x)
		if inline[i] != got {
			t.Fatalf("ewExpInto(%v) = %v, ewExp = %v", x, inline[i], got)
		}
		want := float32(math.Exp(float64(x)))
		d := int(math.Float32bits(got)) - int(math.Float32bits(want))
		if d < 0 {
			d = -d
		}
		worst = max(worst, d)
	}
	if worst > 1 {
		t.Errorf("exp is %d ulp off at worst", worst)
	}
	inf := float32(math.Inf(1))
	if ewExp(inf) != inf || ewExp(-inf) != 0 || ewExp(0) != 1 || !math.IsNaN(float64(ewExp(float32(math.NaN())))) {
		t.Errorf("exp specials: %v %v %v", ewExp(inf), ewExp(-inf), ewExp(0))
	}
}

func TestBinaryBF16RoundsToNearestEven(t *testing.T) {
	ewtScope(t)
	// 1 + 2^-8 is half way between bfloat16 neighbours 1 and 1+2^-7: ties go to even (1).
	// 1+2^-7 + 2^-8 is half way too, and rounds up to the even 1+2^-6.
	a := tensor.FromFloat32([]float32{1, 1 + 1.0/128, 1, 3}, []int{4}, tensor.BFloat16)
	b := tensor.FromFloat32([]float32{1.0 / 256, 1.0 / 256, 3.0 / 512, 1.0 / 3}, []int{4}, tensor.BFloat16)
	got := tensor.Add(a, b).Float32s()
	want := []float32{1, 1 + 1.0/64, 1 + 1.0/128, tensor.BF16ToF32(tensor.F32ToBF16(3 + tensor.BF16ToF32(tensor.F32ToBF16(1.0/3))))}
	if !slices.Equal(got, want) {
		t.Errorf("bf16 add = %v, want %v", got, want)
	}
}

func TestBinaryRemainderAndFloorDivide(t *testing.T) {
	ewtScope(t)
	x := []float32{-7, 7, -7, 7, 6, -6}
	y := []float32{3, -3, -3, 3, 3, 3}
	rem := []float64{2, -2, -1, 1, 0, 0}
	fdiv := []float64{-3, -3, 2, 2, 2, -2}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64} {
		a := tensor.FromFloat32(x, []int{6}, dt)
		b := tensor.FromFloat32(y, []int{6}, dt)
		ewtSame(t, "rem "+dt.String(), tensor.Remainder(a, b).Float64s(), rem, 0)
		ewtSame(t, "floordiv "+dt.String(), tensor.FloorDivide(a, b).Float64s(), fdiv, 0)
	}
	// 0 with a negative divisor keeps the divisor's sign, as Python does
	r := tensor.Remainder(tensor.FromFloat32([]float32{6}, nil, tensor.Float32), tensor.FromFloat32([]float32{-3}, nil, tensor.Float32)).Float64s()[0]
	if r != 0 || !math.Signbit(r) {
		t.Errorf("6 %% -3 = %v, want -0", r)
	}
	// integer division by zero gives 0 rather than a fault
	a := tensor.FromInts([]int{5, -5, 0}, []int{3}, tensor.Int32)
	z := tensor.FromInts([]int{0, 0, 0}, []int{3}, tensor.Int32)
	ewtSame(t, "rem by 0", tensor.Remainder(a, z).Float64s(), []float64{0, 0, 0}, 0)
	ewtSame(t, "floordiv by 0", tensor.FloorDivide(a, z).Float64s(), []float64{0, 0, 0}, 0)
	u := tensor.FromInts([]int{7, 250}, []int{2}, tensor.Uint8)
	v := tensor.FromInts([]int{3, 10}, []int{2}, tensor.Uint8)
	ewtSame(t, "uint8 add wraps", tensor.Add(u, v).Float64s(), []float64{10, 4}, 0)
	ewtSame(t, "uint8 sub wraps", tensor.Sub(v, u).Float64s(), []float64{252, 16}, 0)
}

func TestBinaryNaN(t *testing.T) {
	ewtScope(t)
	nan := float32(math.NaN())
	a := tensor.FromFloat32([]float32{nan, 1, 2, nan}, []int{4}, tensor.Float32)
	b := tensor.FromFloat32([]float32{1, nan, 1, nan}, []int{4}, tensor.Float32)
	n := math.NaN()
	ewtSame(t, "max", tensor.Maximum(a, b).Float64s(), []float64{n, n, 2, n}, 0)
	ewtSame(t, "min", tensor.Minimum(a, b).Float64s(), []float64{n, n, 1, n}, 0)
	ewtSame(t, "eq", tensor.Equal(a, b).Float64s(), []float64{0, 0, 0, 0}, 0)
	ewtSame(t, "ne", tensor.NotEqual(a, b).Float64s(), []float64{1, 1, 1, 1}, 0)
	ewtSame(t, "gt", tensor.Greater(a, b).Float64s(), []float64{0, 0, 1, 0}, 0)
	if got := tensor.Equal(a, b).DType(); got != tensor.Bool {
		t.Errorf("comparison dtype %s", got)
	}
}

// TestBinaryLayouts checks every operand layout the fast paths
// distinguish against a naive broadcast over the logical values.
func TestBinaryLayouts(t *testing.T) {
	ewtScope(t)
	base := tensor.FromFloat32(ewtRand(6*5*4, 1), []int{6, 5, 4}, tensor.Float32)
	other := tensor.FromFloat32(ewtRand(6*5*4, 2), []int{6, 5, 4}, tensor.Float32)
	cases := []struct {
		name string
		a, b *tensor.Array
	}{
		{"dense", base, other},
		{"row", base, tensor.SliceAxis(tensor.SliceAxis(other, 0, 0, 1), 1, 0, 1)},
		{"col", base, tensor.SliceAxis(other, 2, 1, 2)},
		{"scalar", base, tensor.FromFloat32([]float32{0.5}, nil, tensor.Float32)},
		{"scalar-first", tensor.FromFloat32([]float32{0.5}, nil, tensor.Float32), base},
		{"transposed", tensor.Transpose(base, 2, 0, 1), tensor.Transpose(other, 2, 0, 1)},
		{"transposed-vs-dense", tensor.Transpose(base, 1, 0, 2), tensor.Contiguous(tensor.Transpose(other, 1, 0, 2))},
		{"transposed-row", tensor.Transpose(base, 0, 2, 1), tensor.FromFloat32(ewtRand(5, 3), []int{5}, tensor.Float32)},
		{"strided-slice", tensor.Slice(base, []int{0, 1, 0}, []int{6, 5, 4}, []int{2, 2, 3}), tensor.FromFloat32(ewtRand(2, 4), []int{2}, tensor.Float32)},
		{"outer", tensor.Reshape(tensor.SliceAxis(tensor.Flatten(base), 0, 0, 7), 7, 1), tensor.Reshape(tensor.SliceAxis(tensor.Flatten(other), 0, 0, 9), 1, 9)},
		{"broadcast-view", tensor.BroadcastTo(tensor.FromFloat32(ewtRand(4, 5), []int{4}, tensor.Float32), 3, 4), tensor.Transpose(tensor.FromFloat32(ewtRand(12, 6), []int{4, 3}, tensor.Float32), 1, 0)},
	}
	ops := []struct {
		name string
		f    func(a, b *tensor.Array) *tensor.Array
		ref  func(x, y float64) float64
	}{
		{"add", tensor.Add, func(x, y float64) float64 { return x + y }},
		{"sub", tensor.Sub, func(x, y float64) float64 { return x - y }},
		{"mul", tensor.Mul, func(x, y float64) float64 { return x * y }},
		{"less", tensor.Less, func(x, y float64) float64 {
			if x < y {
				return 1
			}
			return 0
		}},
	}
	for _, c := range cases {
		shape, _ := tensor.BroadcastShapes(c.a.Shape(), c.b.Shape())
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
			a, b := tensor.AsType(c.a, dt), tensor.AsType(c.b, dt)
			av, bv := a.Float64s(), b.Float64s()
			for _, op := range ops {
				want := make([]float64, numel(shape))
				for i := range want {
					w := op.ref(av[ewtBcastIndex(shape, a.Shape(), i)], bv[ewtBcastIndex(shape, b.Shape(), i)])
					if op.name != "less" {
						w = tensor.AsType(tensor.FromFloat64([]float64{w}, nil, tensor.Float32), dt).Float64s()[0]
					}
					want[i] = w
				}
				got := op.f(a, b)
				if !slices.Equal(got.Shape(), shape) {
					t.Fatalf("%s %s: shape %v, want %v", c.name, op.name, got.Shape(), shape)
				}
				tol := 0.0
				if dt == tensor.Float32 || dt == tensor.BFloat16 {
					tol = 1e-6
				}
				ewtSame(t, c.name+" "+op.name+" "+dt.String(), got.Float64s(), want, tol)
			}
		}
	}
}

func TestWhereBroadcast(t *testing.T) {
	ewtScope(t)
	cond := tensor.Transpose(tensor.FromBools([]bool{true, false, false, true, true, false}, []int{2, 3}), 1, 0) // [3,2]
	a := tensor.FromFloat32([]float32{1, 2}, []int{2}, tensor.BFloat16)
	b := tensor.FromFloat32([]float32{-1, -2, -3}, []int{3, 1}, tensor.BFloat16)
	got := tensor.Where(cond, a, b).Float64s()
	// cond rows: [t,t] [f,t] [f,f]
	ewtSame(t, "where", got, []float64{1, 2, -2, 2, -3, -3}, 0)
}

func TestUnarySemantics(t *testing.T) {
	ewtScope(t)
	x := tensor.FromFloat32([]float32{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7}, []int{7}, tensor.Float32)
	ewtSame(t, "round", tensor.Round(x).Float64s(), []float64{-2, -2, -0, 0, 2, 2, 4}, 0)
	ewtSame(t, "floor", tensor.Floor(x).Float64s(), []float64{-3, -2, -1, 0, 1, 2, 3}, 0)
	big := tensor.FromFloat32([]float32{-100, -20, 0, 20, 100}, []int{5}, tensor.Float32)
	ewtSame(t, "softplus", tensor.Softplus(big).Float64s(), []float64{math.Log1p(math.Exp(-100)), math.Log1p(math.Exp(-20)), math.Ln2, 20 + math.Log1p(math.Exp(-20)), 100}, 1e-6)
	ewtSame(t, "sigmoid", tensor.Sigmoid(big).Float64s(), []float64{math.Exp(-100), 1 / (1 + math.Exp(20)), 0.5, 1 / (1 + math.Exp(-20)), 1}, 1e-6)
	g := tensor.FromFloat32([]float32{-1, 0.5, 2}, []int{3}, tensor.Float32)
	var gelu, geluTanh []float64
	for _, v := range []float64{-1, 0.5, 2} {
		gelu = append(gelu, v/2*(1+math.Erf(v/math.Sqrt2)))
		geluTanh = append(geluTanh, 0.5*v*(1+math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
	}
	ewtSame(t, "gelu", tensor.Gelu(g).Float64s(), gelu, 1e-6)
	ewtSame(t, "gelu tanh", tensor.GeluApprox(g).Float64s(), geluTanh, 1e-6)
	i := tensor.FromInts([]int{-3, 0, 4}, []int{3}, tensor.Int32)
	ewtSame(t, "int neg", tensor.Neg(i).Float64s(), []float64{3, 0, -4}, 0)
	ewtSame(t, "int abs", tensor.Abs(i).Float64s(), []float64{3, 0, 4}, 0)
	ewtSame(t, "int sign", tensor.Sign(i).Float64s(), []float64{-1, 0, 1}, 0)
	ewtSame(t, "int round", tensor.Round(i).Float64s(), []float64{-3, 0, 4}, 0)
	if got := tensor.Neg(i).DType(); got != tensor.Int32 {
		t.Errorf("neg int32 gives %s", got)
	}
	nan := float32(math.NaN())
	f := tensor.FromFloat32([]float32{nan, float32(math.Inf(-1)), 0, 1}, []int{4}, tensor.BFloat16)
	ewtSame(t, "isnan", tensor.IsNaN(f).Float64s(), []float64{1, 0, 0, 0}, 0)
	ewtSame(t, "isinf", tensor.IsInf(f).Float64s(), []float64{0, 1, 0, 0}, 0)
	ewtSame(t, "not", tensor.LogicalNot(f).Float64s(), []float64{0, 0, 1, 0}, 0)
	// exp of a bfloat16 array rounds to nearest even from float32
	e := tensor.Exp(tensor.FromFloat32([]float32{1}, []int{1}, tensor.BFloat16)).Float32s()[0]
	if want := tensor.BF16ToF32(tensor.F32ToBF16(float32(math.E))); e != want {
		t.Errorf("bf16 exp(1) = %v, want %v", e, want)
	}
}

func TestAsTypeSemantics(t *testing.T) {
	ewtScope(t)
	nan := float32(math.NaN())
	f := tensor.FromFloat32([]float32{-1.7, -0.5, 0, 0.9, 2.5, nan, 300}, []int{7}, tensor.Float32)
	ewtSame(t, "to int32", tensor.AsType(f, tensor.Int32).Float64s(), []float64{-1, 0, 0, 0, 2, 0, 300}, 0)
	ewtSame(t, "to uint8", tensor.AsType(f, tensor.Uint8).Float64s(), []float64{255, 0, 0, 0, 2, 0, 44}, 0)
	ewtSame(t, "to bool", tensor.AsType(f, tensor.Bool).Float64s(), []float64{1, 1, 0, 1, 1, 1, 1}, 0)
	b := tensor.FromBools([]bool{true, false}, []int{2})
	ewtSame(t, "bool to f16", tensor.AsType(b, tensor.Float16).Float64s(), []float64{1, 0}, 0)
	big := tensor.FromInts([]int{1<<24 + 1, -(1 << 40) - 3}, []int{2}, tensor.Int64)
	ewtSame(t, "int64 to f32", tensor.AsType(big, tensor.Float32).Float64s(), []float64{1 << 24, -(1 << 40)}, 0)
	ewtSame(t, "int64 to int32 wraps", tensor.AsType(tensor.FromInts([]int{1<<32 + 5}, []int{1}, tensor.Int64), tensor.Int32).Float64s(), []float64{5}, 0)
	// float32 → bfloat16 rounds to nearest even
	h := tensor.AsType(tensor.FromFloat32([]float32{1 + 1.0/256, 1 + 3.0/256}, []int{2}, tensor.Float32), tensor.BFloat16)
	ewtSame(t, "to bf16", h.Float64s(), []float64{1, 1 + 1.0/64}, 0)
	// transposed source
	tr := tensor.Transpose(tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, tensor.Float32), 1, 0)
	ewtSame(t, "transposed", tensor.AsType(tr, tensor.Int64).Float64s(), []float64{1, 4, 2, 5, 3, 6}, 0)
	// same dtype is a view of the same storage
	v := tensor.AsType(f, tensor.Float32)
	if &get(v).buf.data[0] != &get(f).buf.data[0] {
		t.Error("AsType to the same dtype copied")
	}
}

func BenchmarkBinaryAddBF16(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(512*2048, 1), []int{512, 2048}, tensor.BFloat16)
	y := tensor.FromFloat32(ewtRand(2048, 2), []int{2048}, tensor.BFloat16)
	defer tensor.Free(x, y)
	b.SetBytes(512 * 2048 * 2 * 2)
	for b.Loop() {
		tensor.Add(x, y).Free()
	}
}

func BenchmarkBinaryMulF32Dense(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(512*2048, 1), []int{512, 2048}, tensor.Float32)
	y := tensor.FromFloat32(ewtRand(512*2048, 2), []int{512, 2048}, tensor.Float32)
	defer tensor.Free(x, y)
	b.SetBytes(512 * 2048 * 4 * 3)
	for b.Loop() {
		tensor.Mul(x, y).Free()
	}
}

func BenchmarkUnarySiluBF16(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(64*8192, 1), []int{64, 8192}, tensor.BFloat16)
	defer x.Free()
	b.SetBytes(64 * 8192 * 2 * 2)
	for b.Loop() {
		tensor.Silu(x).Free()
	}
}
