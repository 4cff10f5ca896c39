package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPADecode is one decode step's attention (one query token,
// bfloat16) over tk keys of a longer cache: 8 query heads of 256 over 1 or
// 4 K/V heads at 2048 keys, and the 1B-shaped Llama's 32 query heads over
// 8 K/V heads of 64 (gqa) at a few lengths, the call a batched decode
// makes for every row of every layer.
func BenchmarkSDPADecode(b *testing.B) {
	for _, c := range []struct {
		name           string
		hq, hkv, tk, d int
	}{
		{"hkv=1", 8, 1, 2048, 256}, {"hkv=4", 8, 4, 2048, 256},
		{"gqa/tk=64", 32, 8, 64, 64}, {"gqa/tk=256", 32, 8, 256, 64}, {"gqa/tk=1024", 32, 8, 1024, 64},
	} {
		b.Run(c.name, func(b *testing.B) {
			const cache = 4096
			q := tensor.FromFloat32(fzRand(c.hq*c.d, 1), []int{1, c.hq, 1, c.d}, tensor.BFloat16)
			kc := tensor.FromFloat32(fzRand(c.hkv*cache*c.d, 2), []int{1, c.hkv, cache, c.d}, tensor.BFloat16)
			vc := tensor.FromFloat32(fzRand(c.hkv*cache*c.d, 3), []int{1, c.hkv, cache, c.d}, tensor.BFloat16)
			k := tensor.SliceAxis(kc, 2, 0, c.tk)
			v := tensor.SliceAxis(vc, 2, 0, c.tk)
			defer tensor.Free(q, kc, vc, k, v)
			b.SetBytes(int64(2 * c.hkv * c.tk * c.d * 2))
			b.ResetTimer()
			for b.Loop() {
				tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{}).Free()
			}
		})
	}
}

func BenchmarkSDPAPrefill(b *testing.B) {
	const hq, hkv, t, d = 8, 2, 512, 128
	q := tensor.FromFloat32(fzRand(hq*t*d, 1), []int{1, hq, t, d}, tensor.BFloat16)
	k := tensor.FromFloat32(fzRand(hkv*t*d, 2), []int{1, hkv, t, d}, tensor.BFloat16)
	v := tensor.FromFloat32(fzRand(hkv*t*d, 3), []int{1, hkv, t, d}, tensor.BFloat16)
	defer tensor.Free(q, k, v)
	b.ResetTimer()
	for b.Loop() {
		tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{MaskKind: tensor.MaskCausal}).Free()
	}
}

func BenchmarkRoPE(b *testing.B) {
	const h, t, d = 32, 128, 128
	x := tensor.FromFloat32(fzRand(h*t*d, 1), []int{1, h, t, d}, tensor.BFloat16)
	defer x.Free()
	b.SetBytes(int64(h * t * d * 2))
	for b.Loop() {
		tensor.RoPE(x, tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: 100}).Free()
	}
}

// BenchmarkRMSNorm is a prefill's norm (128 rows of 4096) and a decode
// step's (one row of 2048, where the per-call costs dominate).
func BenchmarkRMSNorm(b *testing.B) {
	for _, c := range []struct{ rows, d int }{{128, 4096}, {1, 2048}} {
		x := tensor.FromFloat32(fzRand(c.rows*c.d, 1), []int{c.rows, c.d}, tensor.BFloat16)
		w := tensor.FromFloat32(fzRand(c.d, 2), []int{c.d}, tensor.BFloat16)
		b.Run(fmt.Sprintf("rows=%d/d=%d", c.rows, c.d), func(b *testing.B) {
			b.SetBytes(int64(c.rows * c.d * 2))
			for b.Loop() {
				tensor.RMSNorm(x, w, 1e-6).Free()
			}
		})
		tensor.Free(x, w)
	}
}

// BenchmarkSDPAPagedDecode times decode attention (one query, Hq 32, Hkv
// 8, head dim 128, bfloat16) over keys read in place from a block pool
// (shuffled blocks of 16..256 positions) against the same keys stored
// contiguously, alternating the two every iteration so both see the same
// machine: contig-us and paged-us per call, and their ratio.
func BenchmarkSDPAPagedDecode(b *testing.B) {
	const hq, hkv, d = 32, 8, 128
	r := rand.New(rand.NewPCG(17, 18))
	for _, l := range []int{1024, 8192, 32768} {
		q := tensor.FromFloat32(randF32(r, hq*d), []int{1, hq, 1, d}, tensor.BFloat16)
		// the contiguous cache has room to grow, as a decode cache does
		kc := tensor.FromFloat32(randF32(r, hkv*(l+256)*d), []int{1, hkv, l + 256, d}, tensor.BFloat16)
		vc := tensor.FromFloat32(randF32(r, hkv*(l+256)*d), []int{1, hkv, l + 256, d}, tensor.BFloat16)
		k, v := tensor.SliceAxis(kc, 2, 0, l), tensor.SliceAxis(vc, 2, 0, l)
		for _, bs := range []int{16, 32, 64, 128, 256} {
			b.Run(fmt.Sprintf("keys%d/block%d", l, bs), func(b *testing.B) {
				kd, vd := tensor.Contiguous(k), tensor.Contiguous(v)
				kp, vp, table := pagedPools(r, kd, vd, bs, (l+bs-1)/bs+8)
				tensor.Free(kd, vd)
				defer tensor.Free(kp, vp)
				o := tensor.SDPAOptions{MaskKind: tensor.MaskCausal}
				var tc, tp time.Duration
				for b.Loop() {
					t0 := time.Now()
					tensor.ScaledDotProductAttention(q, k, v, o).Free()
					t1 := time.Now()
					tensor.ScaledDotProductAttentionPaged(q, kp, vp, table, l, o).Free()
					tc += t1.Sub(t0)
					tp += time.Since(t1)
				}
				n := float64(b.N)
				b.ReportMetric(tc.Seconds()/n*1e6, "contig-us")
				b.ReportMetric(tp.Seconds()/n*1e6, "paged-us")
				b.ReportMetric(tp.Seconds()/tc.Seconds(), "ratio")
			})
		}
		tensor.Free(q, kc, vc, k, v)
	}
}
