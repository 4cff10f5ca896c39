package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// ewtReduceRef reduces the logical values of a (shape) over axes naively.
func ewtReduceRef(vals []float64, shape, axes []int, f func(acc []float64) float64) []float64 {
	isRed := make([]bool, len(shape))
	for _, a := range axes {
		isRed[a] = true
	}
	var kept []int
	for i, d := range shape {
		if !isRed[i] {
			kept = append(kept, d)
		}
	}
	groups := make([][]float64, numel(kept))
	for i, v := range vals {
		r, o, mul := i, 0, 1
		for d := len(shape) - 1; d >= 0; d-- {
			c := r % shape[d]
			r /= shape[d]
			if !isRed[d] {
				o += c * mul
				mul *= shape[d]
			}
		}
		groups[o] = append(groups[o], v)
	}
	out := make([]float64, len(groups))
	for i, g := range groups {
		out[i] = f(g)
	}
	return out
}

func TestReduceAxesAndLayouts(t *testing.T) {
	ewtScope(t)
	dense := tensor.FromFloat32(ewtRand(4*3*5*2, 3), []int{4, 3, 5, 2}, tensor.Float32)
	inputs := map[string]*tensor.Array{
		"dense":      dense,
		"transposed": tensor.Transpose(dense, 2, 0, 3, 1),
		"sliced":     tensor.Slice(dense, []int{1, 0, 1, 0}, []int{4, 3, 5, 2}, []int{1, 2, 2, 1}),
	}
	sum := func(g []float64) float64 {
		s := 0.0
		for _, v := range g {
			s += v
		}
		return s
	}
	mx := func(g []float64) float64 { return slices.Max(g) }
	lse := func(g []float64) float64 {
		m := slices.Max(g)
		s := 0.0
		for _, v := range g {
			s += math.Exp(v - m)
		}
		return m + math.Log(s)
	}
	for name, a := range inputs {
		vals := a.Float64s()
		for _, axes := range [][]int{{3}, {0}, {1, 2}, {0, 2}, {0, 1, 2, 3}, {1, 3}} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				x := tensor.AsType(a, dt)
				xv := x.Float64s()
				ewtSame(t, name+" sum", tensor.Sum(x, axes, false).Float64s(), ewtReduceRef(xv, x.Shape(), axes, sum), 1e-2)
				ewtSame(t, name+" max", tensor.Max(x, axes, false).Float64s(), ewtReduceRef(xv, x.Shape(), axes, mx), 0)
				ewtSame(t, name+" lse", tensor.LogSumExp(x, axes, false).Float64s(), ewtReduceRef(xv, x.Shape(), axes, lse), 1e-2)
			}
			got := tensor.Sum(a, axes, true)
			for _, ax := range axes {
				if got.Shape()[ax] != 1 {
					t.Fatalf("keepDims shape %v for axes %v", got.Shape(), axes)
				}
			}
			ewtSame(t, name+" sum f32", got.Float64s(), ewtReduceRef(vals, a.Shape(), axes, sum), 1e-6)
		}
	}
}

func TestReduceDTypesAndEdges(t *testing.T) {
	ewtScope(t)
	b := tensor.FromBools([]bool{true, true, false, true}, []int{4})
	s := tensor.Sum(b, nil, false)
	if s.DType() != tensor.Int32 || s.Item() != 3 {
		t.Errorf("sum of bool = %v %s, want 3 int32", s.Item(), s.DType())
	}
	u := tensor.FromInts([]int{200, 100}, []int{2}, tensor.Uint8)
	if s := tensor.Sum(u, nil, false); s.DType() != tensor.Uint32 || s.Item() != 300 {
		t.Errorf("sum of uint8 = %v %s, want 300 uint32", s.Item(), s.DType())
	}
	i := tensor.FromInts([]int{1, 2}, []int{2}, tensor.Int32)
	if m := tensor.Mean(i, nil, false); m.DType() != tensor.Float32 || m.Item() != 1.5 {
		t.Errorf("mean of int32 = %v %s", m.Item(), m.DType())
	}
	if p := tensor.Prod(tensor.FromInts([]int{1 << 20, 1 << 20}, []int{2}, tensor.Int32), nil, false); p.Item() != 0 {
		t.Errorf("int32 prod should wrap to 0, got %v", p.Item())
	}
	ninf := float32(math.Inf(-1))
	l := tensor.LogSumExp(tensor.FromFloat32([]float32{ninf, ninf, 0, 1}, []int{2, 2}, tensor.Float32), []int{1}, false).Float64s()
	if !math.IsInf(l[0], -1) || math.Abs(l[1]-(1+math.Log1p(math.Exp(-1)))) > 1e-6 {
		t.Errorf("logsumexp rows = %v", l)
	}
	nan := float32(math.NaN())
	m := tensor.Max(tensor.FromFloat32([]float32{1, nan, 3}, []int{3}, tensor.Float32), nil, false).Item()
	if !math.IsNaN(m) {
		t.Errorf("max with NaN = %v", m)
	}
	empty := tensor.Zeros([]int{3, 0}, tensor.Float32)
	ewtSame(t, "empty sum", tensor.Sum(empty, []int{1}, false).Float64s(), []float64{0, 0, 0}, 0)
	ewtSame(t, "empty prod", tensor.Prod(empty, []int{1}, false).Float64s(), []float64{1, 1, 1}, 0)
	ewtSame(t, "empty any", tensor.Any(empty, []int{1}, false).Float64s(), []float64{0, 0, 0}, 0)
	ewtSame(t, "empty all", tensor.All(empty, []int{1}, false).Float64s(), []float64{1, 1, 1}, 0)
	if got := tensor.Sum(empty, []int{0}, false).Shape(); !slices.Equal(got, []int{0}) {
		t.Errorf("sum over the non-empty axis has shape %v", got)
	}
}

func TestReduceLongSumAccuracy(t *testing.T) {
	ewtScope(t)
	const n = 1 << 20
	vals := make([]float32, n)
	want, half := 0.0, 0.0
	for i := range vals {
		vals[i] = 1 + float32(i%1000)*1e-3
		want += float64(vals[i])
		if i == n/2-1 {
			half = want
		}
	}
	for _, shape := range [][]int{{n}, {2, n / 2}} {
		a := tensor.FromFloat32(vals, shape, tensor.Float32)
		got := tensor.Sum(a, nil, false).Item()
		if math.Abs(got-want)/want > 1e-6 {
			t.Errorf("sum %v of 1M = %v, want %v", shape, got, want)
		}
		mean := tensor.Mean(a, []int{len(shape) - 1}, false).Float64s()
		wantMean := want / n
		if len(shape) == 2 {
			wantMean = half / (n / 2)
		}
		if math.Abs(mean[0]-wantMean) > 1e-6 {
			t.Errorf("mean %v = %v, want %v", shape, mean[0], wantMean)
		}
	}
}

// TestReduceLongRowSplit covers the path that splits one long row across
// workers and merges partial results.
func TestReduceLongRowSplit(t *testing.T) {
	ewtScope(t)
	const n = 1<<17 + 3
	x := ewtRand(n, 11)
	for i := range 1000 {
		x[i] = float32(math.Inf(-1)) // the first partial sees only -inf
	}
	x[n-5] = 9
	a := tensor.FromFloat32(x, []int{n}, tensor.Float32)
	v := a.Float64s()
	s, m := 0.0, slices.Max(v)
	for _, f := range v {
		s += math.Exp(f - m)
	}
	if got, want := tensor.LogSumExp(a, nil, false).Item(), m+math.Log(s); math.Abs(got-want) > 1e-5 {
		t.Errorf("long logsumexp = %v, want %v", got, want)
	}
	if got := tensor.Max(a, nil, false).Item(); got != 9 {
		t.Errorf("long max = %v", got)
	}
	if got := tensor.Argmax(a, 0, false).Item(); got != n-5 {
		t.Errorf("long argmax = %v", got)
	}
	x[n-1] = float32(math.NaN())
	b := tensor.FromFloat32(x, []int{n}, tensor.Float32)
	if got := tensor.LogSumExp(b, nil, false).Item(); !math.IsNaN(got) {
		t.Errorf("long logsumexp with NaN = %v", got)
	}
	if got := tensor.Min(b, nil, false).Item(); !math.IsNaN(got) {
		t.Errorf("long min with NaN = %v", got)
	}
	ints, want := make([]int, n), 0
	for i := range ints {
		ints[i] = i % 7
		want += i % 7
	}
	if got := tensor.Sum(tensor.FromInts(ints, []int{n}, tensor.Int32), nil, false).Item(); got != float64(want) {
		t.Errorf("long int sum = %v, want %v", got, want)
	}
}

func TestArgReduce(t *testing.T) {
	ewtScope(t)
	nan := float32(math.NaN())
	a := tensor.FromFloat32([]float32{
		1, 3, 3, 0,
		2, nan, 5, nan,
		nan, 1, 0, 0,
	}, []int{3, 4}, tensor.Float32)
	ewtSame(t, "argmax", tensor.Argmax(a, 1, false).Float64s(), []float64{1, 1, 0}, 0)
	ewtSame(t, "argmin", tensor.Argmin(a, 1, false).Float64s(), []float64{3, 0, 2}, 0)
	col := tensor.Argmax(tensor.Transpose(a, 1, 0), 0, true)
	if !slices.Equal(col.Shape(), []int{1, 3}) || col.DType() != tensor.Int32 {
		t.Fatalf("argmax keepDims shape %v %s", col.Shape(), col.DType())
	}
	ewtSame(t, "argmax transposed", col.Float64s(), []float64{1, 1, 0}, 0)
	i := tensor.FromInts([]int{4, -1, 4, -1}, []int{4}, tensor.Int64)
	ewtSame(t, "int argmax", tensor.Argmax(i, 0, false).Float64s(), []float64{0}, 0)
	ewtSame(t, "int argmin", tensor.Argmin(i, 0, false).Float64s(), []float64{1}, 0)
}

func softmaxRef(x []float64) []float64 {
	m := slices.Max(x)
	out := make([]float64, len(x))
	s := 0.0
	for i, v := range x {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func TestSoftmax(t *testing.T) {
	ewtScope(t)
	a := tensor.FromFloat32(ewtRand(3*7, 5), []int{3, 7}, tensor.Float32)
	v := a.Float64s()
	var want []float64
	for r := range 3 {
		want = append(want, softmaxRef(v[r*7:(r+1)*7])...)
	}
	ewtSame(t, "softmax", tensor.Softmax(a, 1).Float64s(), want, 1e-6)
	// axis 0 of the transpose is the same computation
	ewtSame(t, "softmax axis 0", tensor.Transpose(tensor.Softmax(tensor.Transpose(a, 1, 0), 0), 1, 0).Float64s(), want, 1e-6)
	bf := tensor.Softmax(tensor.AsType(a, tensor.BFloat16), -1)
	if bf.DType() != tensor.BFloat16 {
		t.Errorf("bf16 softmax gives %s", bf.DType())
	}
	ewtSame(t, "softmax bf16", bf.Float64s(), want, 1e-2)
	// a fully masked row is NaN, as in MLX; other rows are unaffected
	ninf := float32(math.Inf(-1))
	m := tensor.Softmax(tensor.FromFloat32([]float32{ninf, ninf, 0, ninf}, []int{2, 2}, tensor.Float32), 1).Float64s()
	if !math.IsNaN(m[0]) || !math.IsNaN(m[1]) || m[2] != 1 || m[3] != 0 {
		t.Errorf("masked softmax = %v", m)
	}
	// the long-row parallel path agrees with the reference
	const vocab = 262144
	x := ewtRand(vocab, 9)
	x[17] = ninf
	big := tensor.FromFloat32(x, []int{1, vocab}, tensor.Float32)
	bv := big.Float64s()
	ewtSame(t, "vocab softmax", tensor.Softmax(big, 1).Float64s(), softmaxRef(bv), 1e-5)
}

func TestCumsum(t *testing.T) {
	ewtScope(t)
	a := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, tensor.Float32)
	ewtSame(t, "incl", tensor.Cumsum(a, 1, false, true).Float64s(), []float64{1, 3, 6, 4, 9, 15}, 0)
	ewtSame(t, "excl", tensor.Cumsum(a, 1, false, false).Float64s(), []float64{0, 1, 3, 0, 4, 9}, 0)
	ewtSame(t, "rev incl", tensor.Cumsum(a, 1, true, true).Float64s(), []float64{6, 5, 3, 15, 11, 6}, 0)
	ewtSame(t, "rev excl", tensor.Cumsum(a, 1, true, false).Float64s(), []float64{5, 3, 0, 11, 6, 0}, 0)
	ewtSame(t, "axis 0", tensor.Cumsum(a, 0, false, true).Float64s(), []float64{1, 2, 3, 5, 7, 9}, 0)
	ewtSame(t, "transposed", tensor.Cumsum(tensor.Transpose(a, 1, 0), 1, false, true).Float64s(), []float64{1, 5, 2, 7, 3, 9}, 0)
	b := tensor.Cumsum(tensor.FromBools([]bool{true, false, true}, []int{3}), 0, false, true)
	if b.DType() != tensor.Int32 {
		t.Errorf("cumsum of bool gives %s", b.DType())
	}
	ewtSame(t, "bool", b.Float64s(), []float64{1, 1, 2}, 0)
}

func BenchmarkSoftmaxVocab(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(262144, 1), []int{1, 262144}, tensor.Float32)
	defer x.Free()
	b.SetBytes(262144 * 4)
	for b.Loop() {
		tensor.Softmax(x, -1).Free()
	}
}

// BenchmarkLogSoftmaxSampler is the sampler's log-softmax of one and of
// eight float32 rows of a 32000-token vocabulary.
func BenchmarkLogSoftmaxSampler(b *testing.B) {
	for _, rows := range []int{1, 8} {
		x := tensor.FromFloat32(ewtRand(rows*32000, 1), []int{rows, 32000}, tensor.Float32)
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			for b.Loop() {
				tensor.LogSoftmax(x, -1).Free()
			}
		})
		x.Free()
	}
}

func BenchmarkSumLastAxisBF16(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(512*2048, 1), []int{512, 2048}, tensor.BFloat16)
	defer x.Free()
	b.SetBytes(512 * 2048 * 2)
	for b.Loop() {
		tensor.Sum(x, []int{1}, false).Free()
	}
}

// TestMaxVector holds ewMaxF32's vector path to its element loop bit for
// bit: NaNs (first one's payload returned), signed zeros, infinities,
// an initial value above, equal to or below the row, and lengths around
// the vector width.
func TestMaxVector(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 4))
	nan1, nan2 := math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00002)
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	specials := []float32{nan1, nan2, 0, negZero, inf, -inf}
	for trial := range 4000 {
		n := []int{63, 64, 65, 80, 127, 128, 1000, 32000}[trial%8]
		x := make([]float32, n)
		mode := trial / 8 % 6
		for i := range x {
			switch mode {
			case 0, 1:
				x[i] = float32(r.NormFloat64())
			case 2: // all ≤ 0 with zeros: the maximum is a zero
				x[i] = -float32(math.Abs(r.NormFloat64()))
				if r.IntN(50) == 0 {
					x[i] = []float32{0, negZero}[r.IntN(2)]
				}
			case 3:
				x[i] = -inf
			default:
				x[i] = float32(r.NormFloat64())
				if r.IntN(200) == 0 {
					x[i] = specials[r.IntN(len(specials))]
				}
			}
		}
		if mode == 1 && n > 70 {
			x[n-1-r.IntN(15)] = 50 // the maximum in the scalar tail
		}
		for _, m := range []float32{float32(math.Inf(-1)), 0, negZero, x[r.IntN(n)], 10, nan2} {
			got, want := ewMaxF32(m, x), ewMaxF32Loop(m, x)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("n=%d mode=%d m=%v: %#x, loop %#x", n, mode, m, math.Float32bits(got), math.Float32bits(want))
			}
		}
	}
}
