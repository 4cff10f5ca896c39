package cpu

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestLoadF16 holds the vector widening to tensor.F16ToF32 bit for bit for
// every float16 bit pattern (subnormals, infinities, quiet and signalling
// NaNs of both signs), at every offset and with tails shorter than a vector.
func TestLoadF16(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		src := make([]uint16, 1<<16+13)
		for i := range src {
			src[i] = uint16(i)
		}
		for _, off := range []int{0, 1, 7, 9} {
			s := src[off:]
			got := make([]float32, len(s))
			loadF16(got, s)
			for i, h := range s {
				if g, w := math.Float32bits(got[i]), math.Float32bits(tensor.F16ToF32(h)); g != w {
					t.Fatalf("off %d: %#04x: got %#08x, want %#08x", off, h, g, w)
				}
			}
		}
		for n := range 40 {
			got := make([]float32, n)
			s := src[0x7c00+n : 0x7c00+2*n] // infinities and NaNs
			loadF16(got, s)
			for i, h := range s {
				if g, w := math.Float32bits(got[i]), math.Float32bits(tensor.F16ToF32(h)); g != w {
					t.Fatalf("n %d: %#04x: got %#08x, want %#08x", n, h, g, w)
				}
			}
		}
	})
}

// TestF16FusedVectorExact holds the float16 RoPE, RMSNorm, LayerNorm,
// Dequantize (float16 scales) and SDPA's float16 mask, whose roundings go a row at a time through
// storeF16/loadF16 on AVX-512/AVX2 machines, to the portable per-element
// tensor.RoundTo path bit for bit (odd widths leave vector tails).
func TestF16FusedVectorExact(t *testing.T) {
	run := func() [][]uint16 {
		var out [][]uint16
		for _, d := range []int{64, 37, 130} {
			r := make([]float32, 3*5*d)
			for i := range r {
				r[i] = float32(math.Sin(float64(i)*1.7)) * float32(1+i%13)
			}
			x := tensor.FromFloat32(r, []int{1, 3, 5, d}, tensor.Float16)
			w := tensor.FromFloat32(r[:d], []int{d}, tensor.Float16)
			for _, trad := range []bool{false, true} {
				dims := d &^ 1
				if d == 130 {
					dims = 96 // a partial rotation
				}
				out = append(out, u16sOf(tensor.RoPE(x, tensor.RoPEOptions{Dims: dims, Base: 10000, Scale: 1, Offset: 7, Traditional: trad})))
			}
			if d == 64 {
				wq, sc, bi := tensor.Quantize(tensor.FromFloat32(r[:5*d], []int{5, d}, tensor.Float16), 32, 4)
				for _, odt := range []tensor.DType{tensor.Float16, tensor.Float32} {
					dq := tensor.AsType(tensor.Dequantize(wq, sc, bi, 32, 4, odt), tensor.Float16)
					out = append(out, u16sOf(dq))
				}
			}
			if d == 64 {
				// an additive float16 mask over 300 keys (widened a block at a time)
				q := tensor.FromFloat32(r[:2*3*d], []int{1, 2, 3, d}, tensor.Float16)
				kr := make([]float32, 300*d)
				for i := range kr {
					kr[i] = float32(math.Cos(float64(i) * 0.37))
				}
				k := tensor.FromFloat32(kr, []int{1, 1, 300, d}, tensor.Float16)
				mr := make([]float32, 3*300)
				for i := range mr {
					mr[i] = float32(math.Sin(float64(i)*0.11)) * 3
				}
				mask := tensor.FromFloat32(mr, []int{1, 1, 3, 300}, tensor.Float16)
				got := u16sOf(tensor.ScaledDotProductAttention(q, k, k, tensor.SDPAOptions{Scale: 0.125, MaskKind: tensor.MaskArray, Mask: mask}))
				// the float32 mask of the same values adds the same numbers
				ref := u16sOf(tensor.ScaledDotProductAttention(q, k, k, tensor.SDPAOptions{Scale: 0.125, MaskKind: tensor.MaskArray, Mask: tensor.AsType(mask, tensor.Float32)}))
				for i := range ref {
					if got[i] != ref[i] {
						t.Fatalf("f16 mask elem %d: got %#04x, f32 mask gives %#04x", i, got[i], ref[i])
					}
				}
				out = append(out, got)
			}
			out = append(out, u16sOf(tensor.RMSNorm(x, w, 1e-5)), u16sOf(tensor.LayerNorm(x, w, w, 1e-5)), u16sOf(tensor.LayerNorm(x, nil, nil, 1e-5)))
		}
		return out
	}
	want := func() [][]uint16 {
		a512, a2 := hasAVX512, hasAVX2
		hasAVX512, hasAVX2 = false, false
		defer func() { hasAVX512, hasAVX2 = a512, a2 }()
		return run()
	}()
	check := func(name string, got [][]uint16) {
		for k := range want {
			for i := range want[k] {
				if got[k][i] != want[k][i] {
					t.Fatalf("%s case %d elem %d: got %#04x, want %#04x", name, k, i, got[k][i], want[k][i])
				}
			}
		}
	}
	check("simd", run())
	if hasAVX512 && hasAVX2 {
		hasAVX512 = false
		got := run()
		hasAVX512 = true
		check("avx2", got)
	}
}

func u16sOf(a *tensor.Array) []uint16 {
	b := a.Bytes()
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return u
}
