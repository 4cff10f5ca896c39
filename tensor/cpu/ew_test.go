package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// ewSpecialBits mixes ordinary values with the ones rounding and IEEE
// arithmetic treat specially: ±0, ±Inf, NaNs (quiet and signalling),
// subnormals and values at a bfloat16 rounding tie.
func ewSpecialBits(r *rand.Rand, n int) []float32 {
	special := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00001, 0x7f800001, 0xffa00000,
		0x00000001, 0x807fffff, 0x3f808000, 0x3f818000, 0x7f7fffff, 0x00800000}
	v := make([]float32, n)
	for i := range v {
		if r.IntN(4) == 0 {
			v[i] = math.Float32frombits(special[r.IntN(len(special))])
		} else {
			v[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
		}
	}
	return v
}

// bf16NaN reports a bfloat16 NaN.
func bf16NaN(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }

// TestEwBinaryKernels: the AVX-512 element-wise kernels give the loops'
// bits for every op, length (tails included), scalar operand and special
// value. A NaN result is a NaN either way; which operand's payload it
// carries when both are NaN is the instruction's (first source) in the
// kernels and the compiler's operand order in the loops.
func TestEwBinaryKernels(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512: the loops are the only path")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{16, 17, 31, 100, 513, 1040, 4096 + 5} {
		xf, yf := ewSpecialBits(r, n), ewSpecialBits(r, n)
		x, y := make([]uint16, n), make([]uint16, n)
		for i := range x {
			x[i], y[i] = tensor.F32ToBF16(xf[i]), tensor.F32ToBF16(yf[i])
		}
		for _, op := range []tensor.BinaryOp{tensor.OpAdd, tensor.OpSub, tensor.OpMul} {
			for _, c := range []struct {
				name string
				x, y []uint16
			}{{"dense", x, y}, {"scalar y", x, y[3:4]}, {"scalar x", x[5:6], y}} {
				got, want := make([]uint16, n), make([]uint16, n)
				ewBinaryBF16(op, got, c.x, c.y)
				ewBinaryBF16Loop(op, want, c.x, c.y)
				for i := range got {
					if got[i] != want[i] && !(bf16NaN(got[i]) && bf16NaN(want[i])) {
						t.Fatalf("bf16 op %v %s n=%d elem %d: got %#04x, want %#04x", op, c.name, n, i, got[i], want[i])
					}
				}
			}
		}
		for _, op := range []tensor.BinaryOp{tensor.OpAdd, tensor.OpSub, tensor.OpMul, tensor.OpDiv} {
			got, want := make([]float32, n), make([]float32, n)
			ewBinaryF32(op, got, xf, yf)
			hasAVX512 = false
			ewBinaryF32(op, want, xf, yf)
			hasAVX512 = true
			for i := range got {
				g, w := math.Float32bits(got[i]), math.Float32bits(want[i])
				if g != w && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("f32 op %v n=%d elem %d (%v, %v): got %#08x, want %#08x", op, n, i, xf[i], yf[i], g, w)
				}
			}
		}
	}
}
