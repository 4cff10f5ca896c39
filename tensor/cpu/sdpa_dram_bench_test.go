package cpu

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPADecodeDRAM is one batched decode step's attention: 8 rows
// × 16 layers of one-token queries (32 heads, 8 KV heads of d, bfloat16)
// against their own caches of ctx keys, 128 caches of ~0.8 MB at ctx 384
// and d 64 (more than an L3 holds, so each call reads its keys and values from
// memory, as a step does), with blockGemm's per-block prefetch
// (sdpaBlockPrefetch) on and off, alternated in one run. MB/s is cache
// bytes per second.
func BenchmarkSDPADecodeDRAM(b *testing.B) {
	for _, c := range []struct{ ctx, d int }{{128, 64}, {384, 64}, {1024, 64}, {384, 128}} {
		const calls, hq, hkv = 128, 32, 8
		ctx, d := c.ctx, c.d
		qs := make([]*tensor.Array, calls)
		ks := make([]*tensor.Array, calls)
		vs := make([]*tensor.Array, calls)
		for i := range calls {
			qs[i] = tensor.FromFloat32(fzRand(hq*d, uint32(3*i+1)), []int{1, hq, 1, d}, tensor.BFloat16)
			ks[i] = tensor.FromFloat32(fzRand(hkv*ctx*d, uint32(3*i+2)), []int{1, hkv, ctx, d}, tensor.BFloat16)
			vs[i] = tensor.FromFloat32(fzRand(hkv*ctx*d, uint32(3*i+3)), []int{1, hkv, ctx, d}, tensor.BFloat16)
		}
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("ctx=%d/d=%d/block-prefetch=%v", ctx, d, on), func(b *testing.B) {
				defer func(on bool) { sdpaBlockPrefetch = on }(sdpaBlockPrefetch)
				sdpaBlockPrefetch = on
				b.SetBytes(int64(calls * 2 * hkv * ctx * d * 2))
				for b.Loop() {
					for i := range calls {
						tensor.ScaledDotProductAttention(qs[i], ks[i], vs[i], tensor.SDPAOptions{}).Free()
					}
				}
			})
		}
		tensor.Free(qs...)
		tensor.Free(ks...)
		tensor.Free(vs...)
	}
}
