package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkTurboDecodeAttention times one decode step (write one token,
// attention of one query over the cache, trim) at 1k/8k/32k context, on
// BenchmarkDecodeAttention's layer, for plain bf16, affine 4-bit, and
// TurboQuant k8v3 and k4v3 through the backend's kernel (fused on the
// CPU), and k8v3 through the composed path (decode, SDPA, inverse
// transform). Each iteration steps every kind once, in turn, so that load
// on a shared machine hits them alike; it reports milliseconds per step of
// each kind and the ratios k8v3/plain and k8v3/q4g64.
func BenchmarkTurboDecodeAttention(b *testing.B) {
	kinds := []struct {
		name     string
		make     func() Cache
		composed bool
	}{
		{"plain", func() Cache { return NewKVCache() }, false},
		{"q4g64", func() Cache { c, _ := NewQuantizedKVCache(64, 4); return c }, false},
		{"k8v3", func() Cache { c, _ := NewTurboQuantKVCache(DefaultTurbo); return c }, false},
		{"k4v3", func() Cache { c, _ := NewTurboQuantKVCache(TurboSpec{KeyBits: 4, ValueBits: 3}); return c }, false},
		{"k8v3-composed", func() Cache { c, _ := NewTurboQuantKVCache(DefaultTurbo); return c }, true},
	}
	for _, ctx := range []int{1024, 8192, 32768} {
		b.Run(fmt.Sprintf("ctx=%d", ctx), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 2))
			caches := make([]Cache, len(kinds))
			for i, k := range kinds {
				caches[i] = k.make()
				fill(caches[i], rand.New(rand.NewPCG(5, 3)), ctx-1)
				defer caches[i].Free()
			}
			kn, vn := benchTokens(r, 1)
			q := tensor.FromFloat32(randVals(r, benchHq*benchD), []int{1, benchHq, 1, benchD}, tensor.BFloat16)
			defer tensor.Free(kn, vn, q)
			spent := make([]time.Duration, len(kinds))
			b.ResetTimer()
			for range b.N {
				for i, c := range caches {
					tic := time.Now()
					m := c.MakeMask(1, 0, false)
					kv := c.UpdateAndFetch(kn, vn)
					var out *tensor.Array
					if kinds[i].composed {
						out = turboAttentionComposed(q, kv.Turbo, m.Options(0))
					} else {
						out = Attention(q, kv, m.Options(0))
					}
					tensor.Eval(out)
					out.Free()
					m.Free()
					c.Trim(1)
					spent[i] += time.Since(tic)
				}
			}
			ms := func(i int) float64 { return float64(spent[i].Microseconds()) / 1000 / float64(b.N) }
			for i, k := range kinds {
				b.ReportMetric(ms(i), k.name+"-ms")
			}
			b.ReportMetric(ms(2)/ms(0), "k8v3/plain")
			b.ReportMetric(ms(2)/ms(1), "k8v3/q4g64")
		})
	}
}
