package cpu

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

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

// BenchmarkMatmulDecode is a dense Linear layer (x·Wᵀ, W [2048, 2048]) at
// decode batch sizes: weights from DRAM (a set of copies of at least 128
// MiB is cycled through), GB/s counting the weight bytes read.
func BenchmarkMatmulDecode(b *testing.B) {
	const n, k = 2048, 2048
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		r := rand.New(rand.NewPCG(3, 3))
		ws := make([]*tensor.Array, (qmvStreamBytes+n*k*dt.Size()-1)/(n*k*dt.Size()))
		for i := range ws {
			w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, dt)
			ws[i] = tensor.Transpose(w)
			w.Free()
		}
		for _, m := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("%s_batch%d", dt, m), func(b *testing.B) {
				x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
				defer x.Free()
				for b.Loop() {
					for _, w := range ws {
						tensor.Matmul(x, w).Free()
					}
				}
				prods := float64(b.N * len(ws))
				b.ReportMetric(float64(n*k*dt.Size())*prods/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
		tensor.Free(ws...)
	}
}

// qmvStreamBytes is how much distinct packed weight BenchmarkQMatvec4bit
// cycles through per batch-1 iteration: four times the 32 MiB L3, so that,
// as in a real decode step over a model's layers, the weights come from
// DRAM and not from cache.
const qmvStreamBytes = 128 << 20

// BenchmarkQMatvec4bit is the Linear layer of a 4-bit (group 64) model with
// bfloat16 activations: batch 1 is decode, batches 64 and 256 prefill
// (GFLOP/s is the figure of merit there). GB/s counts the
// packed weight plus scales and biases read per product. Batch 1 runs one
// product on each of a set of distinct copies of the weight (≥ 128 MiB in
// all, like the layers of a model), and reports "ratio": its GB/s over the
// read bandwidth measured (best of three 256 MiB passes, same goroutine
// count as BenchmarkCopyBandwidth) just before it. Batch 64 is
// compute-bound and uses one copy.
func BenchmarkQMatvec4bit(b *testing.B) { benchQMatvec(b, 4, []int{1, 64, 256}) }

// BenchmarkQMatvec8bit is BenchmarkQMatvec4bit's decode case for 8-bit
// weights (the other common mlx-community format).
func BenchmarkQMatvec8bit(b *testing.B) { benchQMatvec(b, 8, []int{1}) }

func benchQMatvec(b *testing.B, bits int, batches []int) {
	for _, s := range [][2]int{{2048, 2048}, {8192, 2048}, {2048, 8192}} {
		n, k := s[0], s[1]
		r := rand.New(rand.NewPCG(2, 2))
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
		for _, m := range batches {
			b.Run(fmt.Sprintf("N%d_K%d_batch%d", n, k, m), func(b *testing.B) {
				x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
				defer x.Free()
				set := layers
				if m > 1 {
					set = [][3]*tensor.Array{{wq, sc, bi}}
				}
				var copyGBs float64
				if m == 1 {
					copyGBs = readBandwidth(3)
				}
				b.ResetTimer()
				for b.Loop() {
					for _, l := range set {
						tensor.QuantizedMatmul(x, l[0], l[1], l[2], true, 64, bits).Free()
					}
				}
				sec := b.Elapsed().Seconds()
				prods := float64(b.N * len(set))
				b.ReportMetric(bytes*prods/sec/1e9, "GB/s")
				b.ReportMetric(2*float64(m*n*k)*prods/sec/1e9, "GFLOP/s")
				if copyGBs > 0 {
					b.ReportMetric(bytes*prods/sec/1e9/copyGBs, "ratio")
				}
			})
		}
		for _, l := range layers {
			tensor.Free(l[:]...)
		}
		tensor.Free(wq, sc, bi)
	}
}

// readBuf is the 256 MiB buffer the bandwidth measurements sum (allocated
// once: page faults are not bandwidth).
var readBuf = sync.OnceValue(func() []uint64 {
	buf := make([]uint64, 256<<20/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	return buf
})

// sumRead sums buf split over w goroutines, the memory-read pattern the
// bandwidth measurements time.
func sumRead(buf []uint64, w int, sums []uint64) {
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

// readBandwidth is the best of passes timed sumRead runs, in GB/s.
func readBandwidth(passes int) float64 {
	buf := readBuf()
	w := workers()
	sums := make([]uint64, w*8)
	best := 0.0
	for range passes {
		t0 := time.Now()
		sumRead(buf, w, sums)
		best = max(best, float64(len(buf)*8)/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// BenchmarkCopyBandwidth measures the machine's memory read bandwidth (a
// 256 MiB buffer summed by as many goroutines as the kernels use), the
// ceiling for memory-bound kernels such as the batch-1 quantized matvec.
func BenchmarkCopyBandwidth(b *testing.B) {
	buf := readBuf()
	w := workers()
	sums := make([]uint64, w*8)
	b.ResetTimer()
	for b.Loop() {
		sumRead(buf, w, sums)
	}
	b.ReportMetric(float64(len(buf)*8)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
