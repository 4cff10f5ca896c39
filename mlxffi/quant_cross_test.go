package mlxffi

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestQuantizeMatchesCPU checks that MLX's affine quantization and the CPU
// backend's produce the same bytes (packed words, scales, biases) on random
// weights, for every supported bit width and group size and the float dtypes.
func TestQuantizeMatchesCPU(t *testing.T) {
	be := mlxBackend(t)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16} {
		for _, bits := range tensor.QuantBitsSupported {
			for _, gs := range tensor.QuantGroupsSupported {
				t.Run(fmt.Sprintf("%s/b%d/g%d", dt, bits, gs), func(t *testing.T) {
					n, k := 4, 2*gs
					w := make([]float32, n*k)
					for i := range w {
						w[i] = float32(rng.NormFloat64()) * 0.1
					}
					// the same element bytes on both backends
					src := tensor.FromFloat32(w, []int{n, k}, dt)
					defer src.Free()
					raw := src.Bytes()
					var cq, cs, cb *tensor.Array
					if err := tensor.Try(func() {
						cq, cs, cb = tensor.Quantize(tensor.FromBytesOn(cpu.Default, raw, []int{n, k}, dt, false), gs, bits)
					}); err != nil {
						t.Skipf("CPU Quantize unavailable: %v", err)
					}
					defer tensor.Free(cq, cs, cb)
					mw := tensor.FromBytesOn(be, raw, []int{n, k}, dt, false)
					defer mw.Free()
					mq, ms, mb := tensor.Quantize(mw, gs, bits)
					defer tensor.Free(mq, ms, mb)
					for _, p := range []struct {
						name string
						c, m *tensor.Array
					}{{"packed", cq, mq}, {"scales", cs, ms}, {"biases", cb, mb}} {
						if p.c.DType() != p.m.DType() || fmt.Sprint(p.c.Shape()) != fmt.Sprint(p.m.Shape()) {
							t.Fatalf("%s: cpu %s%v, mlx %s%v", p.name, p.c.DType(), p.c.Shape(), p.m.DType(), p.m.Shape())
						}
						if cbs, mbs := p.c.Bytes(), p.m.Bytes(); !bytes.Equal(cbs, mbs) {
							i := 0
							for i < len(cbs) && cbs[i] == mbs[i] {
								i++
							}
							t.Errorf("%s differ from byte %d of %d", p.name, i, len(cbs))
						}
					}
				})
			}
		}
	}
}
