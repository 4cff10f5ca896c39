package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// expScalar runs f with the vector kernels switched off.
func expScalar(f func()) {
	defer func(on bool) { ewExpVector = on }(ewExpVector)
	ewExpVector = false
	f()
}

// needExpVector skips a test that compares the kernels with the scalar
// loops where the kernels cannot run.
func needExpVector(t *testing.T) {
	t.Helper()
	if !ewExpVector {
		t.Skip("no AVX-512: the scalar loops are the only path")
	}
}

// sameBits32 fails unless got and want hold the same bit patterns.
func sameBits32(t *testing.T, what string, got, want, in []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] (input %#08x = %v): vector %#08x (%v), scalar %#08x (%v)", what, i,
				math.Float32bits(in[i]), in[i], math.Float32bits(got[i]), got[i],
				math.Float32bits(want[i]), want[i])
		}
	}
}

// checkExpChunk compares ewExpInto's vector and scalar paths on x with
// offset c: every result and the returned sum, bit for bit, in a separate
// output and in place, and ewExpOnly's results.
func checkExpChunk(t *testing.T, x []float32, c float32) {
	t.Helper()
	want := make([]float32, len(x))
	var ws float64
	expScalar(func() { ws = ewExpInto(want, x, c) })
	got := make([]float32, len(x)+1)
	got[len(x)] = 12345 // must stay
	gs := ewExpInto(got[:len(x)], x, c)
	sameBits32(t, fmt.Sprintf("exp(x-%v)", c), got, want, x)
	if got[len(x)] != 12345 {
		t.Fatalf("exp wrote past its %d outputs", len(x))
	}
	if math.Float64bits(gs) != math.Float64bits(ws) {
		t.Fatalf("exp sum over %d (c=%v): vector %v (%#x), scalar %v (%#x)", len(x), c, gs,
			math.Float64bits(gs), ws, math.Float64bits(ws))
	}
	in := append([]float32(nil), x...)
	if s := ewExpInto(in, in, c); math.Float64bits(s) != math.Float64bits(ws) {
		t.Fatalf("exp in place: sum %v, scalar %v", s, ws)
	}
	sameBits32(t, "exp in place", in, want, x)
	only := make([]float32, len(x)+1)
	only[len(x)] = 12345
	ewExpOnly(only[:len(x)], x, c) // the kernel without the sums
	sameBits32(t, "exp without sums", only[:len(x)], want, x)
	if only[len(x)] != 12345 {
		t.Fatalf("exp without sums wrote past its %d outputs", len(x))
	}
}

// checkSigmoidChunk does the same for ewSigmoidInto.
func checkSigmoidChunk(t *testing.T, x []float32) {
	t.Helper()
	want := make([]float32, len(x))
	expScalar(func() { ewSigmoidInto(want, x) })
	got := make([]float32, len(x)+1)
	got[len(x)] = 12345
	ewSigmoidInto(got[:len(x)], x)
	sameBits32(t, "sigmoid", got, want, x)
	if got[len(x)] != 12345 {
		t.Fatalf("sigmoid wrote past its %d outputs", len(x))
	}
	in := append([]float32(nil), x...)
	ewSigmoidInto(in, in)
	sameBits32(t, "sigmoid in place", in, want, x)
}

// expPatterns calls f with chunks of float32s whose bit patterns run from
// lo to hi (inclusive, as unsigned integers) every step patterns.
func expPatterns(lo, hi, step uint32, f func([]float32)) {
	const chunk = 1 << 14
	buf := make([]float32, 0, chunk)
	for b := uint64(lo); b <= uint64(hi); b += uint64(step) {
		buf = append(buf, math.Float32frombits(uint32(b)))
		if len(buf) == chunk {
			f(buf)
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		f(buf)
	}
}

// expSweep covers [-110, 90] by bit pattern: every pattern when
// MLXGO_EXP_FULL is set (about 2.2e9 of them), else every 61st plus every
// pattern within 2^16 of each edge of the fast range, of ±0, and of the
// subnormal/normal border. f gets chunks of inputs.
func expSweep(t *testing.T, f func([]float32)) {
	step := uint32(61)
	if os.Getenv("MLXGO_EXP_FULL") != "" {
		step = 1
	} else if testing.Short() {
		step = 1021
	}
	b := math.Float32bits
	expPatterns(0, b(90), step, f)            // +0 … 90
	expPatterns(0x80000000, b(-110), step, f) // -0 … -110
	for _, e := range []float32{88.8, -104, 0, math.SmallestNonzeroFloat32 * (1 << 23)} {
		for _, v := range []float32{e, -e} {
			u := b(v)
			f0 := u &^ 0x7fffffff
			lo, hi := u-min(u&0x7fffffff, 1<<16), u+(1<<16)
			if u&0x7fffffff == 0 { // around ±0: the same sign only
				lo, hi = f0, f0+1<<16
			}
			expPatterns(lo, hi, 1, f)
		}
	}
}

func TestEwExpVectorBitIdentical(t *testing.T) {
	needExpVector(t)
	n := 0
	expSweep(t, func(x []float32) { n += len(x); checkExpChunk(t, x, 0) })
	t.Logf("%d patterns", n)
}

func TestEwSigmoidVectorBitIdentical(t *testing.T) {
	needExpVector(t)
	expSweep(t, func(x []float32) { checkSigmoidChunk(t, x) })
	// the whole float32 line, both signs, coarsely: large |x|, Inf, NaNs
	expPatterns(0, math.MaxUint32, 4099, func(x []float32) { checkSigmoidChunk(t, x) })
}

// expSpecials are inputs at and around the edges, plus NaNs with distinct
// payloads (quiet and signalling, both signs) and infinities.
func expSpecials() []float32 {
	var s []float32
	for _, e := range []float32{88.8, -104, 0, 88, -103, 1, -1, math.SmallestNonzeroFloat32, math.MaxFloat32, 88.72284} {
		for _, v := range []float32{e, -e} {
			s = append(s, v, math.Nextafter32(v, float32(math.Inf(1))), math.Nextafter32(v, float32(math.Inf(-1))))
		}
	}
	inf := float32(math.Inf(1))
	s = append(s, inf, -inf)
	for _, u := range []uint32{0x7fc00000, 0x7fc00001, 0xffc12345, 0x7f800001, 0xff8abcde, 0x7fffffff, 0x7fa00000} {
		s = append(s, math.Float32frombits(u))
	}
	return s
}

func TestEwExpVectorEdgesAndTails(t *testing.T) {
	needExpVector(t)
	r := rand.New(rand.NewPCG(7, 11))
	sp := expSpecials()
	pick := func() float32 {
		switch r.IntN(4) {
		case 0:
			return sp[r.IntN(len(sp))]
		case 1:
			return float32(r.Float64()*220 - 115)
		case 2:
			return float32(r.NormFloat64() * 4)
		}
		return math.Float32frombits(r.Uint32())
	}
	offsets := []float32{0, 1, -1, 3.75, -88.8, 104, float32(math.Inf(1)), float32(math.NaN()),
		math.Float32frombits(0x7fc0beef)}
	for n := 0; n <= 40; n++ {
		for rep := 0; rep < 200; rep++ {
			buf := make([]float32, n+3)
			for i := range buf {
				buf[i] = pick()
			}
			x := buf[rep%4 : rep%4+n] // unaligned starts
			c := offsets[rep%len(offsets)]
			if rep%3 == 0 {
				c = pick()
			}
			checkExpChunk(t, x, c)
			checkSigmoidChunk(t, x)
		}
	}
	// all specials, in every rotation, so each meets every lane position
	for k := range sp {
		x := append(append([]float32(nil), sp[k:]...), sp[:k]...)
		checkExpChunk(t, x, 0)
		checkExpChunk(t, x, 0.5)
		checkSigmoidChunk(t, x)
	}
}

// TestEwExpVectorSums: softmax-like rows (x - max, long and short) give the
// same sums bit for bit, with a few out-of-range lanes scattered in; a
// row whose sum is NaN keeps the NaN payload the scalar loop returns.
func TestEwExpVectorSums(t *testing.T) {
	needExpVector(t)
	r := rand.New(rand.NewPCG(3, 9))
	for _, n := range []int{1, 15, 16, 17, 255, 4096, 50000} {
		for rep := 0; rep < 4; rep++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 6)
			}
			if rep >= 2 {
				for range 1 + n/100 {
					x[r.IntN(n)] = []float32{-200, 100, float32(math.Inf(-1))}[r.IntN(3)]
				}
			}
			if rep == 3 {
				x[r.IntN(n)] = math.Float32frombits(0x7fc00011)
				x[r.IntN(n)] = math.Float32frombits(0xffc00022)
			}
			m := float32(math.Inf(-1))
			for _, v := range x {
				if v == v {
					m = max(m, v)
				}
			}
			checkExpChunk(t, x, m)
		}
	}
}

// BenchmarkEwExp times ewExpInto (softmax's exp and sum, c = the row max)
// and ewSigmoidInto on 8192-element rows, through the scalar loops and
// the AVX-512 kernels: ns/elem per wall second and cpu-ns/elem per CPU
// second of this process.
func BenchmarkEwExp(b *testing.B) {
	const n = 8192
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	o := make([]float32, n)
	for _, op := range []string{"exp", "sigmoid"} {
		for _, path := range []string{"scalar", "vector"} {
			b.Run(op+"_"+path, func(b *testing.B) {
				if path == "vector" && !hasAVX512 {
					b.Skip("no AVX-512")
				}
				defer func(on bool) { ewExpVector = on }(ewExpVector)
				ewExpVector = path == "vector"
				var sink float64
				c0 := processCPU()
				for b.Loop() {
					if op == "exp" {
						sink += ewExpInto(o, x, 12)
					} else {
						ewSigmoidInto(o, x)
					}
				}
				cpu := processCPU() - c0
				elems := float64(b.N) * n
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/elems, "ns/elem")
				if cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/elems, "cpu-ns/elem")
				}
				if sink != sink {
					b.Fatal("NaN sum")
				}
			})
		}
	}
}
