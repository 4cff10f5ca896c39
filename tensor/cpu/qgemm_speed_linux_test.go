package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// threadCPU is this thread's CPU time: on a machine shared with other
// work it measures a single-threaded kernel's speed where wall time can't.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQGemmCPU runs the 4-bit prefill product on one thread and
// reports GFLOP/s per core of its own CPU time (unaffected by other
// processes sharing the cores, unlike BenchmarkQMatvec4bit's wall time).
func BenchmarkQGemmCPU(b *testing.B) {
	if !hasBF16 {
		b.Skip("no AVX512_BF16")
	}
	for _, s := range [][3]int{{64, 2048, 2048}, {256, 2048, 2048}, {256, 2048, 8192}, {256, 8192, 2048}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("M%d_N%d_K%d", m, n, k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(3, 3))
			w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
			wq, sc, bi := tensor.Quantize(w, 64, 4)
			x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
			defer tensor.Free(w, wq, sc, bi, x)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			var cpu time.Duration
			for b.Loop() {
				t0 := threadCPU()
				tensor.QuantizedMatmul(x, wq, sc, bi, true, 64, 4).Free()
				cpu += threadCPU() - t0
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/cpu.Seconds()/1e9, "cpu-GFLOP/s")
		})
	}
}
