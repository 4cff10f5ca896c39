package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkQMatmulSmallM is a 4- and 8-bit (group 64) Linear layer x·Wᵀ
// at batched-decode row counts (1, 2, 4, 8, 16 bfloat16 x rows), weights
// from DRAM (distinct copies, at least 128 MiB in all, cycled through as a
// decode step walks a model's layers). GB/s counts the packed weight plus
// scales and biases read once per product, whatever the row count, so it
// stays flat while a product costs one read of the weights; rowGB/s
// multiplies it by the rows (the weight bytes the rows would read one at
// a time), and GB/cpu-s divides by this process's CPU time instead (the
// figure to compare on a machine shared with other work). Kernels: z the
// float32-x AVX-512 one (qmvZ), t1 the bfloat16 one-row kernels over whole
// rows, t the default (two-row kernels for passes of 4 x rows, long rows
// in chunks); _f16 rows take float16 x (qmvT's hi+lo split).
func BenchmarkQMatmulSmallM(b *testing.B) {
	for _, bits := range []int{4, 8} {
		for _, s := range [][2]int{{8192, 2048}, {2048, 8192}} {
			n, k := s[0], s[1]
			r := rand.New(rand.NewPCG(5, 5))
			w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
			wq, sc, bi := tensor.Quantize(w, 64, bits)
			w.Free()
			bytes := float64(n*k*bits/8 + 2*2*n*k/64)
			layers := make([][3]*tensor.Array, (qmvStreamBytes+int(bytes)-1)/int(bytes))
			for i := range layers {
				for j, a := range []*tensor.Array{wq, sc, bi} {
					layers[i][j] = tensor.FromBytes(a.Bytes(), a.Shape(), a.DType())
				}
			}
			for _, m := range []int{1, 2, 4, 8, 16} {
				for _, kern := range []string{"z", "t1", "t", "z_f16", "t_f16", "q8"} {
					xdt := tensor.BFloat16
					if strings.HasSuffix(kern, "_f16") {
						xdt, kern = tensor.Float16, strings.TrimSuffix(kern, "_f16")
					}
					name := fmt.Sprintf("b%d_N%d_K%d_rows%d_%s", bits, n, k, m, kern)
					if xdt == tensor.Float16 {
						name += "_f16"
					}
					b.Run(name, func(b *testing.B) {
						defer func(xb int) {
							qmvzOn, qmvTFirstOn, qmvPairsOn, qmvChunkXBytes = true, true, true, xb
						}(qmvChunkXBytes)
						qmvzOn, qmvTFirstOn = kern == "z", kern != "z"
						if kern == "t1" { // one-row kernels over whole rows
							qmvPairsOn, qmvChunkXBytes = false, 1<<30
						}
						x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, xdt)
						defer x.Free()
						if kern == "q8" {
							if !q8Kernels {
								b.Skip("no AVX512_VNNI")
							}
							defer SetInt8Activations(Int8Activations())
							SetInt8Activations(true)
							for _, l := range layers { // the repack, untimed
								tensor.QuantizedMatmul(x, l[0], l[1], l[2], true, 64, bits).Free()
							}
							b.ResetTimer()
						}
						c0 := processCPU()
						for b.Loop() {
							for _, l := range layers {
								tensor.QuantizedMatmul(x, l[0], l[1], l[2], true, 64, bits).Free()
							}
						}
						cpu := processCPU() - c0
						gb := bytes * float64(b.N*len(layers)) / 1e9
						b.ReportMetric(gb/b.Elapsed().Seconds(), "GB/s")
						b.ReportMetric(gb/b.Elapsed().Seconds()*float64(m), "rowGB/s")
						if cpu > 0 {
							b.ReportMetric(gb/cpu.Seconds(), "GB/cpu-s")
						}
					})
				}
			}
			for _, l := range layers {
				tensor.Free(l[:]...)
			}
			tensor.Free(wq, sc, bi)
		}
	}
}
