package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkPagedDecodeAttention is BenchmarkDecodeAttention (one token
// written, one query over the cache, the token trimmed again) for paged
// caches at block sizes 16, 64 and 256 next to the contiguous KVCache, on
// the same layer shape: "paged" attends through Attention (the block-table
// kernel), "gather" copies the blocks into contiguous keys and values
// first and runs SDPA on them (the path quantized layers and backends
// without the kernel take).
func BenchmarkPagedDecodeAttention(b *testing.B) {
	for _, ctx := range []int{1024, 8192, 32768} {
		for _, bs := range []int{0, 16, 64, 256} {
			for _, gather := range []bool{false, true} {
				name := "contiguous"
				switch {
				case bs > 0 && gather:
					name = fmt.Sprintf("gather%d", bs)
				case bs > 0:
					name = fmt.Sprintf("paged%d", bs)
				case gather:
					continue
				}
				b.Run(fmt.Sprintf("ctx=%d/%s", ctx, name), func(b *testing.B) {
					benchPagedDecode(b, ctx, bs, gather)
				})
			}
		}
	}
}

func benchPagedDecode(b *testing.B, ctx, bs int, gather bool) {
	r := rand.New(rand.NewPCG(5, 2))
	var c Cache = NewKVCache()
	if bs > 0 {
		pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: (ctx + bs - 1) / bs, Layers: []LayerSpec{{}}, Preallocate: true})
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Free()
		c = pool.NewCaches()[0]
	}
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
		if gather {
			parts := kv.Paged.Gather()
			out = tensor.ScaledDotProductAttention(q, parts[0], parts[1], m.Options(0))
			tensor.Free(parts...)
		} else {
			out = Attention(q, kv, m.Options(0))
		}
		tensor.Eval(out)
		out.Free()
		m.Free()
		c.Trim(1)
	}
}
