package cpu

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func benchMatmul(b *testing.B, dt tensor.DType) {
	const m, k, n = 512, 2048, 2048
	r := rand.New(rand.NewPCG(1, 1))
	x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
	w := tensor.FromFloat32(randF32(r, k*n), []int{k, n}, dt)
	defer tensor.Free(x, w)
	b.ResetTimer()
	for b.Loop() {
		tensor.Matmul(x, w).Free()
	}
	b.ReportMetric(2*m*k*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkMatmulF32 is a prefill-sized float32 product (512×2048 @ 2048×2048).
func BenchmarkMatmulF32(b *testing.B) { benchMatmul(b, tensor.Float32) }

// BenchmarkMatmulBF16 is the same product in bfloat16 (computed in float32).
func BenchmarkMatmulBF16(b *testing.B) { benchMatmul(b, tensor.BFloat16) }

// BenchmarkQMatvec4bit is the Linear layer of a 4-bit (group 64) model with
// bfloat16 activations: batch 1 is decode, batch 64 prefill. GB/s counts the
// packed weight plus scales and biases read per product.
func BenchmarkQMatvec4bit(b *testing.B) {
	for _, s := range [][2]int{{2048, 2048}, {8192, 2048}, {2048, 8192}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(2, 2))
		w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
		wq, sc, bi := tensor.Quantize(w, 64, 4)
		w.Free()
		bytes := float64(n*k/2 + 2*2*n*k/64)
		for _, m := range []int{1, 64} {
			b.Run(fmt.Sprintf("N%d_K%d_batch%d", n, k, m), func(b *testing.B) {
				x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
				defer x.Free()
				b.ResetTimer()
				for b.Loop() {
					tensor.QuantizedMatmul(x, wq, sc, bi, true, 64, 4).Free()
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(bytes*float64(b.N)/sec/1e9, "GB/s")
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/sec/1e9, "GFLOP/s")
			})
		}
		tensor.Free(wq, sc, bi)
	}
}

// BenchmarkCopyBandwidth measures the machine's memory read bandwidth (a
// 256 MiB buffer summed by as many goroutines as the kernels use), the
// ceiling for memory-bound kernels such as the batch-1 quantized matvec.
func BenchmarkCopyBandwidth(b *testing.B) {
	buf := make([]uint64, 256<<20/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	w := workers()
	sums := make([]uint64, w*8)
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		per := len(buf) / w
		for g := range w {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := buf[g*per : (g+1)*per]
				var a0, a1, a2, a3, a4, a5, a6, a7 uint64
				for i := 0; i+8 <= len(s); i += 8 {
					a0 += s[i]
					a1 += s[i+1]
					a2 += s[i+2]
					a3 += s[i+3]
					a4 += s[i+4]
					a5 += s[i+5]
					a6 += s[i+6]
					a7 += s[i+7]
				}
				sums[g*8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(len(buf)*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
