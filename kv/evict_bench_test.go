package kv

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkEvictedStates is the token loop's share of spilling an evicted
// prefix: copying a 2,048-token chain out of a pool shaped like a 1B
// model's (16 layers, 8 KV heads of 64, bfloat16, blocks of 16) with
// Evicted.States. SetBytes is the chain's KV, so MB/s is the copy rate.
//
//	go test ./kv -run '^$' -bench EvictedStates
func BenchmarkEvictedStates(b *testing.B) {
	const layers, n, bs = 16, 2048, 16
	specs := make([]LayerSpec, layers)
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: n/bs + 1, Layers: specs})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(1, 2)), hq: 8, hkv: 8, d: 64, dv: 64, dt: tensor.BFloat16}
	caches := pool.NewCaches()
	for _, c := range caches {
		for range n / 256 {
			k, v, q := s.chunk(256)
			c.UpdateAndFetch(k, v)
			tensor.Free(k, v, q)
		}
	}
	toks := ids(0, n)
	if got, err := pool.RegisterPrefix(caches, toks); got != n || err != nil {
		b.Fatalf("registered %d (%v)", got, err)
	}
	for _, c := range caches {
		c.Free()
	}
	ev := &Evicted{pool: pool, chain: pool.prefix.lookup("", toks, n)}
	b.SetBytes(int64(ev.Bytes()))
	for b.Loop() {
		st, err := ev.States()
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range st {
			x.Free()
		}
	}
}
