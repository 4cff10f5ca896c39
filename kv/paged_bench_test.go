package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

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

// BenchmarkPagedVsContiguous times the same decode step (as
// BenchmarkPagedDecodeAttention) on a contiguous cache and on its paged
// equivalent, alternating them within every iteration (in rotating order)
// so that load changes on a shared machine hit both alike, and reports
// each one's milliseconds per step and their ratio. For plain bfloat16 KV
// it also times the paged cache through the gather (blocks copied into
// contiguous keys and values, then SDPA); quantized paged layers always
// gather (q8g64).
func BenchmarkPagedVsContiguous(b *testing.B) {
	for _, kind := range []string{"plain", "q8g64"} {
		for _, ctx := range []int{1024, 8192, 32768} {
			for _, bs := range []int{16, 64, 256} {
				if kind != "plain" && bs != 64 {
					continue
				}
				b.Run(fmt.Sprintf("%s/ctx=%d/bs=%d", kind, ctx, bs), func(b *testing.B) {
					benchPagedVsContiguous(b, kind, ctx, bs)
				})
			}
		}
	}
}

func benchPagedVsContiguous(b *testing.B, kind string, ctx, bs int) {
	r := rand.New(rand.NewPCG(5, 2))
	spec := LayerSpec{}
	var contig Cache = NewKVCache()
	if kind == "q8g64" {
		spec.Quant = QuantSpec{Bits: 8, GroupSize: 64}
		contig = mustQ(NewQuantizedKVCache(64, 8))
	}
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: (ctx + bs - 1) / bs, Layers: []LayerSpec{spec}, Preallocate: true})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Free()
	paged := pool.NewCaches()[0]
	defer contig.Free()
	defer paged.Free()
	fill(contig, rand.New(rand.NewPCG(5, 3)), ctx-1)
	fill(paged, rand.New(rand.NewPCG(5, 3)), ctx-1)
	kn, vn := benchTokens(r, 1)
	q := tensor.FromFloat32(randVals(r, benchHq*benchD), []int{1, benchHq, 1, benchD}, tensor.BFloat16)
	defer tensor.Free(kn, vn, q)
	run := func(c Cache, gather bool) time.Duration {
		t0 := time.Now()
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
		d := time.Since(t0)
		out.Free()
		m.Free()
		c.Trim(1)
		return d
	}
	steps := []func() time.Duration{
		func() time.Duration { return run(contig, false) },
		func() time.Duration { return run(paged, false) },
	}
	if kind == "plain" {
		steps = append(steps, func() time.Duration { return run(paged, true) })
	}
	total := make([]time.Duration, len(steps))
	b.ResetTimer()
	for i := range b.N {
		for j := range steps {
			k := (i + j) % len(steps)
			total[k] += steps[k]()
		}
	}
	n := float64(b.N)
	b.ReportMetric(total[0].Seconds()*1e3/n, "contig-ms")
	b.ReportMetric(total[1].Seconds()*1e3/n, "paged-ms")
	b.ReportMetric(float64(total[1])/float64(total[0]), "paged/contig")
	if len(total) > 2 {
		b.ReportMetric(total[2].Seconds()*1e3/n, "gather-ms")
		b.ReportMetric(float64(total[2])/float64(total[0]), "gather/contig")
	}
}

// BenchmarkRowsWrite is one layer's KV write of a batched decode step:
// 8 rows of 200 tokens each on paged caches (block size 64) take one token
// each through kv.Rows (keys and values [1, 8, 8, 64] bfloat16), which
// are trimmed again after every iteration.
func BenchmarkRowsWrite(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 2))
	const rows, ctx = 8, 200
	pool, err := NewPool(PoolConfig{BlockSize: 64, Blocks: rows * 8, Layers: []LayerSpec{{}}, Preallocate: true})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Free()
	cs := make([]Cache, rows)
	lens := make([]int, rows)
	for i := range cs {
		c, err := pool.NewCache(0)
		if err != nil {
			b.Fatal(err)
		}
		fill(c, r, ctx)
		cs[i], lens[i] = c, 1
	}
	defer func() {
		for _, c := range cs {
			c.Free()
		}
	}()
	k := tensor.FromFloat32(randVals(r, 8*rows*64), []int{1, 8, rows, 64}, tensor.BFloat16)
	v := tensor.FromFloat32(randVals(r, 8*rows*64), []int{1, 8, rows, 64}, tensor.BFloat16)
	defer tensor.Free(k, v)
	rw := NewRows(cs, lens)
	b.ResetTimer()
	for range b.N {
		sc := tensor.NewScope()
		rw.UpdateAndFetch(k, v)
		sc.Close()
		for _, c := range cs {
			c.Trim(1)
		}
	}
}
