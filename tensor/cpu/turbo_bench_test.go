package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// BenchmarkSDPATurboDecode times the attention of one decode step (32
// query heads over 8 KV heads of dim 64: the 1B-shaped layer) on k8v3
// TurboQuant codes against plain SDPA on bfloat16 keys and values, at
// 1k/8k/32k keys, alternating the two per iteration, and reports each
// one's milliseconds and the ratio turbo/plain (time: below 1 is faster).
func BenchmarkSDPATurboDecode(b *testing.B) {
	be := &cpu.Backend{}
	const hq, hkv, d = 32, 8, 64
	r := rand.New(rand.NewPCG(9, 9))
	levels := []float32{-2.15195, -1.34391, -0.75601, -0.24509, 0.24509, 0.75601, 1.34391, 2.15195}
	signs := make([]float32, d)
	for i := range signs {
		signs[i] = float32(1 - 2*r.IntN(2))
	}
	l := tensor.TurboLayout{KeyBits: 8, ValueBits: 3, KeyDim: d, ValueDim: d, Group: 32, Levels: levels, Signs: signs}
	for _, tk := range []int{1024, 8192, 32768} {
		b.Run(fmt.Sprintf("ctx=%d", tk), func(b *testing.B) {
			keys := tensor.FromBytesOn(be, turboRows(r, hkv, tk, d, 8, 2), []int{1, hkv, tk, l.KeyBytes()}, tensor.Uint8, false)
			values := tensor.FromBytesOn(be, turboRows(r, hkv, tk, d, 3, 1), []int{1, hkv, tk, l.ValueBytes()}, tensor.Uint8, false)
			rnd := func(n int) []float32 {
				out := make([]float32, n)
				for i := range out {
					out[i] = float32(r.NormFloat64())
				}
				return out
			}
			pk := tensor.FromFloat32On(be, rnd(hkv*tk*d), []int{1, hkv, tk, d}, tensor.BFloat16)
			pv := tensor.FromFloat32On(be, rnd(hkv*tk*d), []int{1, hkv, tk, d}, tensor.BFloat16)
			q := tensor.FromFloat32On(be, rnd(hq*d), []int{1, hq, 1, d}, tensor.BFloat16)
			defer tensor.Free(keys, values, pk, pv, q)
			var tt, tp time.Duration
			b.ResetTimer()
			for range b.N {
				tic := time.Now()
				o := be.SDPATurbo(q, keys, values, l, tensor.SDPAOptions{})
				tensor.Eval(o)
				o.Free()
				tt += time.Since(tic)
				tic = time.Now()
				o = tensor.ScaledDotProductAttention(q, pk, pv, tensor.SDPAOptions{})
				tensor.Eval(o)
				o.Free()
				tp += time.Since(tic)
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(tt), "turbo-ms")
			b.ReportMetric(ms(tp), "plain-ms")
			b.ReportMetric(float64(tt)/float64(tp), "turbo/plain")
		})
	}
}
