package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// fma32 is float32 a·b + c rounded once (the kernels' VFMADD231PS).
func fma32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(400).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// q8Ref is the int8-activation product computed as q8.go defines it, one
// row at a time from MLX's packed codes: the exact integer dot per group,
// then per group acc = fma(Σq·x8, s·d, acc) and acc = fma(b, d·Σx8, acc).
func q8Ref(x []float32, wq, sc, bi *tensor.Array, m, n, k, gs, bits int) []float32 {
	words := u32s(wq.Bytes())
	sv, bv := sc.Float32s(), bi.Float32s()
	ng, ldx := k/gs, q8RowBytes(k, gs)
	xq := make([]byte, ldx)
	codes := make([]uint8, k)
	out := make([]float32, m*n)
	for i := range m {
		q8QuantizeRef(xq, x[i*k:(i+1)*k], gs)
		for r := range n {
			unpackCodes(codes, words[r*k*bits/32:(r+1)*k*bits/32], bits)
			var acc float32
			for g := range ng {
				gd := xq[g*(gs+8):]
				var isum int32
				for j := range gs {
					isum += int32(codes[g*gs+j]) * int32(int8(gd[j]))
				}
				d := math.Float32frombits(u32le(gd[gs:]))
				ds := math.Float32frombits(u32le(gd[gs+4:]))
				acc = fma32(float32(isum), sv[r*ng+g]*d, acc)
				acc = fma32(bv[r*ng+g], ds, acc)
			}
			out[i*n+r] = acc
		}
	}
	return out
}

func u32le(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// TestQ8Exact holds the int8 kernels (every x row count 1..8 and tiles of
// 8 beyond, 4- and 8-bit, group sizes 32/64/128, N with a partial row
// block, scales in bfloat16 — packed as bfloat16 — and in float16 and
// float32 — packed as float32) to q8Ref bit for bit, and checks that each row's result is the
// one it gets alone (M = 1) and that the packs die with their weights.
func TestQ8Exact(t *testing.T) {
	if !q8Kernels {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built for this CPU")
	}
	defer SetInt8Activations(Int8Activations())
	SetInt8Activations(true)
	live := tensor.LiveArrays()
	packs, _ := Int8Packs()
	r := rand.New(rand.NewPCG(5, 8))
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16, tensor.Float32} {
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for _, c := range []struct{ k, n int }{{1024, 16}, {gs * (512/gs + 3), 40}, {2048, 48}} {
					for _, m := range []int{1, 2, 3, 5, 8, 11, 19} {
						checkQ8(t, r, dt, bits, gs, c.k, c.n, m)
					}
				}
			}
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
	if n, _ := Int8Packs(); n != packs {
		t.Errorf("%d int8 packs outlived their weights", n-packs)
	}
}

func checkQ8(t *testing.T, r *rand.Rand, dt tensor.DType, bits, gs, k, n, m int) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	name := fmt.Sprintf("%v/b%d/g%d/k%d/n%d/m%d", dt, bits, gs, k, n, m)
	wv := randF32(r, n*k)
	for i := range wv {
		wv[i] = wv[i]*3 + 0.5
	}
	w := tensor.FromFloat32(wv, []int{n, k}, dt)
	wq, sc, bi := tensor.Quantize(w, gs, bits)
	if sc.DType() != dt {
		t.Fatalf("%s: scales are %v", name, sc.DType())
	}
	xv := randF32(r, m*k)
	xv[0] *= 40 // an outlier in one group
	x := tensor.FromFloat32(xv, []int{m, k}, tensor.Float32)
	got := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, bits).Float32s()
	want := q8Ref(xv, wq, sc, bi, m, n, k, gs, bits)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g, want %g", name, i, got[i], want[i])
		}
	}
	// the quantization's drift from the float product stays small (rows
	// past the first, which holds the outlier)
	ref, _, _, _ := qmvRef(xv, wq, sc, bi, m, n, k, gs, bits)
	var e2, r2 float64
	for i := n; i < len(ref); i++ {
		e2 += (float64(got[i]) - ref[i]) * (float64(got[i]) - ref[i])
		r2 += ref[i] * ref[i]
	}
	if rel := math.Sqrt(e2 / r2); m > 1 && !(rel < 0.02) {
		t.Fatalf("%s: relative RMS drift %.3g from the float product", name, rel)
	}
	if m > 1 { // a row alone gets the same bits
		last := tensor.FromFloat32(xv[(m-1)*k:], []int{1, k}, tensor.Float32)
		solo := tensor.QuantizedMatmul(last, wq, sc, bi, true, gs, bits).Float32s()
		for j := range n {
			if math.Float32bits(solo[j]) != math.Float32bits(got[(m-1)*n+j]) {
				t.Fatalf("%s: row %d alone [%d] = %g, in the batch %g", name, m-1, j, solo[j], got[(m-1)*n+j])
			}
		}
	}
}

// TestQ8NonFinite checks that a NaN or infinite activation makes its row's
// outputs NaN (as the float product would not be finite) and leaves the
// other rows alone.
func TestQ8NonFinite(t *testing.T) {
	if !q8Kernels {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built for this CPU")
	}
	defer SetInt8Activations(Int8Activations())
	SetInt8Activations(true)
	s := tensor.NewScope()
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const n, k = 32, 1024
	wq, sc, bi := tensor.Quantize(tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16), 64, 4)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		xv := randF32(r, 2*k)
		xv[k+100] = bad
		got := tensor.QuantizedMatmul(tensor.FromFloat32(xv, []int{2, k}, tensor.Float32), wq, sc, bi, true, 64, 4).Float32s()
		for j := range n {
			if math.IsNaN(float64(got[j])) {
				t.Fatalf("%v: clean row's [%d] is NaN", bad, j)
			}
			if !math.IsNaN(float64(got[n+j])) {
				t.Fatalf("%v: row with %v gives [%d] = %g, want NaN", bad, bad, j, got[n+j])
			}
		}
	}
}

// TestQ8Quantize holds the vector quantizer to q8QuantizeRef byte for
// byte: random groups of several magnitudes, an all-zero group, groups
// with NaN, ±Inf, ties at .5 and subnormal values, group sizes 16..128.
func TestQ8Quantize(t *testing.T) {
	if !q8Kernels {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built for this CPU")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, gs := range []int{16, 32, 64, 128} {
		for trial := range 200 {
			ng := 1 + trial%9
			x := randF32(r, ng*gs)
			for g := range ng {
				scale := float32(math.Pow(10, float64(r.IntN(12)-6)))
				for j := range gs {
					x[g*gs+j] *= scale
				}
				switch r.IntN(8) {
				case 0:
					clear(x[g*gs : (g+1)*gs])
				case 1:
					x[g*gs+r.IntN(gs)] = float32(math.NaN())
				case 2:
					x[g*gs+r.IntN(gs)] = float32(math.Inf(1 - 2*r.IntN(2)))
				case 3: // ties: multiples of amax/254
					for j := range gs {
						x[g*gs+j] = float32(r.IntN(255)-127) / 2
					}
					x[g*gs] = 127
				case 4:
					x[g*gs+r.IntN(gs)] = 1e-42
				}
			}
			n := q8RowBytes(len(x), gs)
			want, got := make([]byte, n), make([]byte, n)
			q8QuantizeRef(want, x, gs)
			q8Quantize(got, x, gs)
			for i := range want {
				if want[i] != got[i] {
					t.Fatalf("gs %d trial %d: byte %d (group %d) = %#x, want %#x", gs, trial, i, i/(gs+8), got[i], want[i])
				}
			}
		}
	}
}
