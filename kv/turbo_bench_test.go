package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkTurboDecodeAttention times one decode step (write one token,
// attention of one query over the cache, trim) at 1k/8k/32k context, on
// BenchmarkDecodeAttention's layer, for plain bf16, affine 4-bit, and
// TurboQuant k8v3 and k4v3 through the backend's kernel (fused on the CPU)
// and k8v3 through the composed path (decode, SDPA, inverse transform),
// one after the other in the same run so that their ratios share the
// machine's load.
func BenchmarkTurboDecodeAttention(b *testing.B) {
	kinds := []struct {
		name     string
		make     func() Cache
		composed bool
	}{
		{"plain", func() Cache { return NewKVCache() }, false},
		{"q4g64", func() Cache { c, _ := NewQuantizedKVCache(64, 4); return c }, false},
		{"turbo-k8v3", func() Cache { c, _ := NewTurboQuantKVCache(DefaultTurbo); return c }, false},
		{"turbo-k4v3", func() Cache { c, _ := NewTurboQuantKVCache(TurboSpec{4, 3}); return c }, false},
		{"turbo-k8v3-composed", func() Cache { c, _ := NewTurboQuantKVCache(DefaultTurbo); return c }, true},
	}
	for _, ctx := range []int{1024, 8192, 32768} {
		for _, k := range kinds {
			b.Run(fmt.Sprintf("ctx=%d/%s", ctx, k.name), func(b *testing.B) {
				r := rand.New(rand.NewPCG(5, 2))
				c := k.make()
				defer c.Free()
				fill(c, r, ctx-1)
				kn, vn := benchTokens(r, 1)
				q := tensor.FromFloat32(randVals(r, benchHq*benchD), []int{1, benchHq, 1, benchD}, tensor.BFloat16)
				defer tensor.Free(kn, vn, q)
				b.ResetTimer()
				for range b.N {
					m := c.MakeMask(1, 0, false)
					kv := c.UpdateAndFetch(kn, vn)
					var out *tensor.Array
					if k.composed {
						out = turboAttentionComposed(q, kv.Turbo, m.Options(0))
					} else {
						out = Attention(q, kv, m.Options(0))
					}
					tensor.Eval(out)
					out.Free()
					m.Free()
					c.Trim(1)
				}
				b.ReportMetric(float64(c.Bytes())/float64(ctx), "B/token")
			})
		}
	}
}
