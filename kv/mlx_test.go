package kv

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestMLXRandomSequences runs the random write sequences of
// TestRandomSequences on MLX (a sixth of them: about 180 sequences, every
// cache kind): attention through KVCache and RotatingKVCache equals
// attention over the full history, the quantized caches stay within their
// bounds, and the caches' arrays live on MLX.
func TestMLXRandomSequences(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	c := NewKVCache()
	k, v := tokens(rand.New(rand.NewPCG(1, 2)), 3)
	kv := c.UpdateAndFetch(k, v)
	if kv.Keys.Backend() != be {
		t.Fatalf("cache keys on %s, want mlx", kv.Keys.Backend().Name())
	}
	tensor.Free(k, v)
	c.Free()
	n := randomSequences(t, 6)
	t.Logf("%d sequences on MLX", n)
}

// TestMLXCacheProperties runs the cache property tests on MLX: trim then
// write, snapshot and restore, clone independence, and the persistence
// round trip (save, memory-mapped load, bit-identical states).
func TestMLXCacheProperties(t *testing.T) {
	mlxtest.UseAsDefault(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"TrimThenWrite", TestTrimThenWrite},
		{"SnapshotRestore", TestSnapshotRestore},
		{"CloneIndependent", TestCloneIndependent},
		{"PersistRoundTrip", TestPersistRoundTrip},
		{"LoadedCacheOutlivesOthers", TestLoadedCacheOutlivesOthers},
		{"QuantizedAttentionMasks", TestQuantizedAttentionMasks},
		{"ToQuantized", TestToQuantized},
	} {
		t.Run(tc.name, tc.f)
	}
}

// TestMLXPersistAcrossBackends saves caches filled on MLX and loads them
// on the CPU backend (and the reverse): the file format does not depend
// on the backend, so the states are bit-identical.
func TestMLXPersistAcrossBackends(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	mlx := mlxtest.UseAsDefault(t)
	cpu, err := tensor.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []struct {
		name     string
		from, to tensor.Backend
	}{{"mlx-to-cpu", mlx, cpu}, {"cpu-to-mlx", cpu, mlx}} {
		t.Run(dir.name, func(t *testing.T) {
			tensor.SetDefault(dir.from)
			cs := filledCaches(t, rand.New(rand.NewPCG(4, 4)))
			path := saveTemp(t, cs, []int32{5, 6})
			tensor.SetDefault(dir.to)
			got, err := Load(path, Expect{ModelID: "tiny-llama@abc", Layers: len(cs)})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range cs {
				a, b := c.State(), got.Caches[i].State()
				for _, arr := range b.Arrays {
					if arr.Backend() != dir.to {
						t.Fatalf("loaded array on %s, want %s", arr.Backend().Name(), dir.to.Name())
					}
				}
				sameState(t, a, b)
				a.Free()
				b.Free()
				c.Free()
			}
			got.Free()
		})
	}
	tensor.SetDefault(mlx)
}
