package cpu

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPADecodeGQA is one decode step's attention at the 1B-shaped
// Llama's heads (32 query heads over 8 K/V heads of 64), bfloat16, at a
// few context lengths: the per-row call a batched decode makes for every
// row of every layer.
func BenchmarkSDPADecodeGQA(b *testing.B) {
	const hq, hkv, d, cache = 32, 8, 64, 4096
	for _, tk := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("tk=%d", tk), func(b *testing.B) {
			q := tensor.FromFloat32(fzRand(hq*d, 1), []int{1, hq, 1, d}, tensor.BFloat16)
			kc := tensor.FromFloat32(fzRand(hkv*cache*d, 2), []int{1, hkv, cache, d}, tensor.BFloat16)
			vc := tensor.FromFloat32(fzRand(hkv*cache*d, 3), []int{1, hkv, cache, d}, tensor.BFloat16)
			k := tensor.SliceAxis(kc, 2, 0, tk)
			v := tensor.SliceAxis(vc, 2, 0, tk)
			defer tensor.Free(q, kc, vc, k, v)
			b.SetBytes(int64(2 * hkv * tk * d * 2))
			for b.Loop() {
				tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{}).Free()
			}
		})
	}
}
