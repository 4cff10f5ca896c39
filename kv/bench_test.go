package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// Benchmarks use one layer of the 1B Llama of the architecture notes:
// 32 query heads, 8 KV heads, head dim 64, bfloat16 activations.
const (
	benchHq  = 32
	benchHkv = 8
	benchD   = 64
)

func benchTokens(r *rand.Rand, n int) (k, v *tensor.Array) {
	k = tensor.FromFloat32(randVals(r, benchHkv*n*benchD), []int{1, benchHkv, n, benchD}, tensor.BFloat16)
	v = tensor.FromFloat32(randVals(r, benchHkv*n*benchD), []int{1, benchHkv, n, benchD}, tensor.BFloat16)
	return
}

type benchKind struct {
	name string
	make func() Cache
}

var benchKinds = []benchKind{
	{"plain", func() Cache { return NewKVCache() }},
	{"q8g64", func() Cache { c, _ := NewQuantizedKVCache(64, 8); return c }},
	{"q4g64", func() Cache { c, _ := NewQuantizedKVCache(64, 4); return c }},
	{"rotating4k", func() Cache { return NewRotatingKVCache(4096, 0) }},
	{"q8rotating4k", func() Cache { c, _ := NewQuantizedRotatingKVCache(4096, 0, 64, 8); return c }},
}

// fill prefills c with n tokens in 1024-token chunks.
func fill(c Cache, r *rand.Rand, n int) {
	for n > 0 {
		m := min(n, 1024)
		k, v := benchTokens(r, m)
		c.UpdateAndFetch(k, v)
		tensor.Free(k, v)
		n -= m
	}
}

// BenchmarkBytesPerToken reports the memory one layer's cache takes per
// token slot (B/token) and in all (MiB/layer) after 8,192 tokens written
// in 1,024-token chunks; the 4,096-token windows hold up to 5,119 tokens
// right after a chunk (mlx-lm's window−1+chunk rule).
func BenchmarkBytesPerToken(b *testing.B) {
	for _, k := range benchKinds {
		b.Run(k.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 1))
			var per, total float64
			for range b.N {
				c := k.make()
				fill(c, r, 8192)
				st := c.State()
				per = float64(c.Bytes()) / float64(st.Arrays[0].Dim(2))
				total = float64(c.Bytes()) / (1 << 20)
				st.Free()
				c.Free()
			}
			b.ReportMetric(per, "B/token")
			b.ReportMetric(total, "MiB/layer")
		})
	}
}

// BenchmarkDecodeAttention times one decode step (write one token, then
// attention of one query over the whole cache) at a fixed context: each
// iteration trims the token it wrote, so the context does not drift.
func BenchmarkDecodeAttention(b *testing.B) {
	for _, ctx := range []int{1024, 8192, 32768} {
		for _, k := range benchKinds[:3] {
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
					out := Attention(q, kv, m.Options(0))
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

// BenchmarkDecodeWrite times the cache write alone at a long context: it
// stays O(new tokens) because the views of the previous step are freed
// before the in-place write (a live view would force a full copy).
func BenchmarkDecodeWrite(b *testing.B) {
	for _, ctx := range []int{1024, 32768} {
		b.Run(fmt.Sprintf("ctx=%d", ctx), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 3))
			c := NewKVCache()
			defer c.Free()
			fill(c, r, ctx-1)
			kn, vn := benchTokens(r, 1)
			defer tensor.Free(kn, vn)
			b.ResetTimer()
			for range b.N {
				c.UpdateAndFetch(kn, vn)
				c.Trim(1)
			}
		})
	}
}
