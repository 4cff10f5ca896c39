package mlxffi

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestSDPAHalfMatchesCPU checks that half-precision attention on MLX
// computes its scores in float32 as the tensor API asks (MLX's unfused
// path, which its CPU device always takes, would round scores to the
// input dtype): on random bfloat16 and float16 inputs, with and without
// a causal mask and grouped queries, the result equals the CPU backend's
// except for rare one-step rounding differences (float32 sums in another
// order). Scores rounded to bfloat16 differ in about half the outputs.
func TestSDPAHalfMatchesCPU(t *testing.T) {
	be := mlxBackend(t)
	if be.Device() != CPU {
		t.Skip("checks MLX's CPU device: on a GPU its fused kernels differ from the CPU backend by more than rounding order")
	}
	rng := rand.New(rand.NewPCG(5, 9))
	live := tensor.LiveArrays()
	for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
		for _, mk := range []tensor.MaskKind{tensor.MaskNone, tensor.MaskCausal} {
			t.Run(fmt.Sprintf("%s/mask%d", dt, mk), func(t *testing.T) {
				sc := tensor.NewScope()
				defer sc.Close()
				const b, hq, hkv, tq, tk, d = 1, 4, 2, 12, 12, 16
				mk4 := func(h, t int, on tensor.Backend) (*tensor.Array, *tensor.Array) {
					v := make([]float32, b*h*t*d)
					for i := range v {
						v[i] = float32(rng.NormFloat64()) * 2
					}
					c := tensor.FromFloat32(v, []int{b, h, t, d}, dt)
					return c, tensor.FromBytesOn(on, c.Bytes(), c.Shape(), dt, false)
				}
				cq, mq := mk4(hq, tq, be)
				ck, mkk := mk4(hkv, tk, be)
				cv, mv := mk4(hkv, tk, be)
				o := tensor.SDPAOptions{Scale: 0.25, MaskKind: mk}
				want := tensor.AsType(tensor.ScaledDotProductAttention(cq, ck, cv, o), tensor.Float32).Float32s()
				got := tensor.AsType(tensor.ScaledDotProductAttention(mq, mkk, mv, o), tensor.Float32).Float32s()
				if cq.Backend() != cpu.Default {
					t.Fatalf("reference ran on %s", cq.Backend().Name())
				}
				differ := 0
				for i := range want {
					if got[i] == want[i] {
						continue
					}
					differ++
					step := float32(math.Ldexp(1, math.Ilogb(float64(want[i]))-7))
					if dt == tensor.Float16 {
						step /= 8
					}
					if d := math.Abs(float64(got[i] - want[i])); d > float64(step) {
						t.Errorf("element %d: mlx %g, cpu %g: more than one %s step apart", i, got[i], want[i], dt)
					}
				}
				t.Logf("%d of %d outputs differ by one step", differ, len(want))
				if differ*50 > len(want) {
					t.Errorf("%d of %d outputs differ (over 2%%): scores not computed in float32", differ, len(want))
				}
			})
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}
