package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestPackCodesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, bits := range tensor.QuantBitsSupported {
		codes := make([]uint8, 128)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		words := make([]uint32, 128*bits/32)
		tensor.PackCodes(words, codes, bits)
		// code j lives at bits [j·bits, (j+1)·bits) of the little-endian stream
		for j, c := range codes {
			var v uint32
			for b := range bits {
				pos := j*bits + b
				v |= (words[pos/32] >> (pos % 32) & 1) << b
			}
			if v != uint32(c) {
				t.Fatalf("bits %d: code %d packed as %d, want %d", bits, j, v, c)
			}
		}
		back := make([]uint8, 128)
		unpackCodes(back, words, bits)
		if !bytes.Equal(back, codes) {
			t.Fatalf("bits %d: unpack differs", bits)
		}
	}
}

// qmmRef is x @ deq.T (transpose) or x @ deq in float64.
func qmmRef(x, deq []float32, m, n, k int, transpose bool) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				w := deq[p*n+j]
				if transpose {
					w = deq[j*k+p]
				}
				s += float64(x[i*k+p]) * float64(w)
			}
			out[i*n+j] = s
		}
	}
	return out
}

// exactDequant is q·scale + bias in float32 without rounding to the scales'
// dtype (what the matmul kernels use).
func exactDequant(wq, sc, bi *tensor.Array, gs, bits int) []float32 {
	words := u32s(wq.Bytes())
	sv, bv := sc.Float32s(), bi.Float32s()
	k := wq.Shape()[wq.NDim()-1] * 32 / bits
	out := make([]float32, len(words)*32/bits)
	codes := make([]uint8, k)
	for r := range len(out) / k {
		unpackCodes(codes, words[r*k*bits/32:], bits)
		for j, c := range codes {
			g := (r*k + j) / gs
			out[r*k+j] = float32(c)*sv[g] + bv[g]
		}
	}
	return out
}

func closeTo(t *testing.T, name string, got []float32, ref []float64, tol float64) {
	t.Helper()
	for i := range ref {
		if d := math.Abs(float64(got[i]) - ref[i]); !(d <= tol*(1+math.Abs(ref[i]))) {
			t.Fatalf("%s: [%d] = %g, want %g", name, i, got[i], ref[i])
		}
	}
}

func TestQuantizedMatmulShapes(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(7, 8))
		for _, bits := range tensor.QuantBitsSupported {
			for _, gs := range []int{32, 64, 128} {
				for _, m := range []int{1, 3, 8, 13, 64} {
					if bits != 4 && m > 13 {
						continue
					}
					checkQMM(t, r, bits, gs, m, 40, 256, tensor.Float32)
				}
			}
		}
		checkQMM(t, r, 4, 64, 1, 96, 512, tensor.BFloat16)
		checkQMM(t, r, 4, 64, 17, 96, 512, tensor.BFloat16)
		checkQMM(t, r, 4, 32, 9, 33, 128, tensor.Float16)
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

func checkQMM(t *testing.T, r *rand.Rand, bits, gs, m, n, k int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	name := fmt.Sprintf("%s/b%d/g%d/m%d", dt, bits, gs, m)
	w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, dt)
	wq, sc, bi := tensor.Quantize(w, gs, bits)
	deq := exactDequant(wq, sc, bi, gs, bits)
	tol := 1e-4
	if dt != tensor.Float32 {
		tol = 1e-2
	}
	x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
	got := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, bits)
	if fmt.Sprint(got.Shape()) != fmt.Sprint([]int{m, n}) {
		t.Fatalf("%s: shape %v", name, got.Shape())
	}
	// the reference uses the unrounded dequantization for 16-bit scales
	closeTo(t, name+"/t", got.Float32s(), qmmRef(x.Float32s(), deq, m, n, k, true), tol*math.Sqrt(float64(k)))
	// not transposed: the same packed matrix read as [K=n, N=k]
	x2 := tensor.FromFloat32(randF32(r, m*n), []int{m, n}, dt)
	got2 := tensor.QuantizedMatmul(x2, wq, sc, bi, false, gs, bits)
	closeTo(t, name+"/n", got2.Float32s(), qmmRef(x2.Float32s(), deq, m, k, n, false), tol*math.Sqrt(float64(n)))
}

func TestQuantizedMatmulBatchedAndGather(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		s := tensor.NewScope()
		r := rand.New(rand.NewPCG(9, 10))
		const e, n, k, m, gs, bits = 4, 24, 128, 3, 32, 4
		w := tensor.FromFloat32(randF32(r, e*n*k), []int{e, n, k}, tensor.Float32)
		wq, sc, bi := tensor.Quantize(w, gs, bits)
		// batched: x [2, 1, m, k] against w [e, n, k] broadcasts to [2, e, m, n]
		x := tensor.FromFloat32(randF32(r, 2*m*k), []int{2, 1, m, k}, tensor.Float32)
		out := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, bits)
		if fmt.Sprint(out.Shape()) != "[2 4 3 24]" {
			t.Fatalf("batched shape %v", out.Shape())
		}
		outv := out.Float32s()
		expert := func(i int) (*tensor.Array, *tensor.Array, *tensor.Array) {
			return tensor.SliceAxis(wq, 0, i, i+1), tensor.SliceAxis(sc, 0, i, i+1), tensor.SliceAxis(bi, 0, i, i+1)
		}
		for xb := range 2 {
			for ex := range e {
				xm := tensor.SliceAxis(x, 0, xb, xb+1)
				xm = tensor.Reshape(xm, m, k)
				q, ss, bb := expert(ex)
				want := tensor.QuantizedMatmul(xm, tensor.Reshape(q, n, k*bits/32), tensor.Reshape(ss, n, k/gs),
					tensor.Reshape(bb, n, k/gs), true, gs, bits).Float32s()
				got := outv[(xb*e+ex)*m*n : (xb*e+ex+1)*m*n]
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("batched (%d,%d)[%d] = %g, want %g", xb, ex, i, got[i], want[i])
					}
				}
			}
		}
		// gather: rhs picks experts, lhs picks x matrices
		xs := tensor.FromFloat32(randF32(r, 5*m*k), []int{5, m, k}, tensor.Float32)
		rhs := tensor.FromInt32([]int32{3, 0, 3, 1, 2, 2}, []int{2, 3})
		lhs := tensor.FromInt32([]int32{4, 0, 1, 1, 2, 3}, []int{2, 3})
		g := tensor.GatherQMM(xs, wq, sc, bi, lhs, rhs, true, gs, bits)
		if fmt.Sprint(g.Shape()) != "[2 3 3 24]" {
			t.Fatalf("gather shape %v", g.Shape())
		}
		gv := g.Float32s()
		rv, lv := rhs.Int32s(), lhs.Int32s()
		for i := range 6 {
			q, ss, bb := expert(int(rv[i]))
			xm := tensor.Reshape(tensor.SliceAxis(xs, 0, int(lv[i]), int(lv[i])+1), m, k)
			want := tensor.QuantizedMatmul(xm, tensor.Reshape(q, n, k*bits/32), tensor.Reshape(ss, n, k/gs),
				tensor.Reshape(bb, n, k/gs), true, gs, bits).Float32s()
			for j := range want {
				if gv[i*m*n+j] != want[j] {
					t.Fatalf("gather entry %d [%d] = %g, want %g", i, j, gv[i*m*n+j], want[j])
				}
			}
		}
		// without lhs indices x's batch dims broadcast against the indices
		x1 := tensor.FromFloat32(randF32(r, m*k), []int{1, m, k}, tensor.Float32)
		rhs1 := tensor.FromInt32([]int32{2, 1}, []int{2})
		g1 := tensor.GatherQMM(x1, wq, sc, bi, nil, rhs1, true, gs, bits).Float32s()
		for i, ex := range []int{2, 1} {
			q, ss, bb := expert(ex)
			want := tensor.QuantizedMatmul(tensor.Reshape(x1, m, k), tensor.Reshape(q, n, k*bits/32), tensor.Reshape(ss, n, k/gs),
				tensor.Reshape(bb, n, k/gs), true, gs, bits).Float32s()
			for j := range want {
				if g1[i*m*n+j] != want[j] {
					t.Fatalf("gather (no lhs) entry %d [%d] = %g, want %g", i, j, g1[i*m*n+j], want[j])
				}
			}
		}
		s.Close()
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// TestQuantizeStridedInput checks that a transposed view quantizes like its
// dense copy.
func TestQuantizeStridedInput(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	r := rand.New(rand.NewPCG(11, 12))
	w := tensor.FromFloat32(randF32(r, 64*48), []int{64, 48}, tensor.BFloat16)
	wt := tensor.SwapAxes(w, 0, 1) // [48, 64], strided
	q1, s1, b1 := tensor.Quantize(wt, 32, 3)
	q2, s2, b2 := tensor.Quantize(tensor.Contiguous(wt), 32, 3)
	for i, pair := range [][2]*tensor.Array{{q1, q2}, {s1, s2}, {b1, b2}} {
		if !bytes.Equal(pair[0].Bytes(), pair[1].Bytes()) {
			t.Fatalf("output %d differs for a strided input", i)
		}
	}
}
