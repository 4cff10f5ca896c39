package cpu

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func BenchmarkSDPADecode(b *testing.B) {
	const hq, tk, d, cache = 8, 2048, 256, 4096
	for _, hkv := range []int{1, 4} {
		b.Run(fmt.Sprintf("hkv=%d", hkv), func(b *testing.B) {
			q := tensor.FromFloat32(fzRand(hq*d, 1), []int{1, hq, 1, d}, tensor.BFloat16)
			kc := tensor.FromFloat32(fzRand(hkv*cache*d, 2), []int{1, hkv, cache, d}, tensor.BFloat16)
			vc := tensor.FromFloat32(fzRand(hkv*cache*d, 3), []int{1, hkv, cache, d}, tensor.BFloat16)
			k := tensor.SliceAxis(kc, 2, 0, tk)
			v := tensor.SliceAxis(vc, 2, 0, tk)
			defer tensor.Free(q, kc, vc, k, v)
			b.SetBytes(int64(2 * hkv * tk * d * 2))
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

func BenchmarkRMSNorm(b *testing.B) {
	const rows, d = 128, 4096
	x := tensor.FromFloat32(fzRand(rows*d, 1), []int{rows, d}, tensor.BFloat16)
	w := tensor.FromFloat32(fzRand(d, 2), []int{d}, tensor.BFloat16)
	defer tensor.Free(x, w)
	b.SetBytes(int64(rows * d * 2))
	for b.Loop() {
		tensor.RMSNorm(x, w, 1e-6).Free()
	}
}
