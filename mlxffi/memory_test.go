package mlxffi

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestMemoryFlat runs 10,000 small op steps, each in a Scope, and checks
// that neither MLX's active memory nor the live-array count grows: every
// mlx_array made by a step is freed exactly once by its owner.
func TestMemoryFlat(t *testing.T) {
	be := mlxBackend(t)
	x := tensor.FullOn(be, []int{16, 16}, 0.5, tensor.Float32)
	defer x.Free()
	step := func() {
		s := tensor.NewScope()
		defer s.Close()
		y := tensor.Softmax(tensor.Add(tensor.Matmul(x, x), tensor.Exp(x)), -1)
		z := tensor.Sum(tensor.Mul(y, y), nil, false)
		tensor.Eval(z)
		_ = z.Bytes()
	}
	for range 100 { // warm the allocator's cache
		step()
	}
	mem0, err := ActiveMemory()
	if err != nil {
		t.Fatal(err)
	}
	live0 := tensor.LiveArrays()
	for range 10000 {
		step()
	}
	mem1, _ := ActiveMemory()
	live1 := tensor.LiveArrays()
	t.Logf("active memory %d -> %d bytes, live arrays %d -> %d", mem0, mem1, live0, live1)
	if live1 != live0 {
		t.Errorf("live arrays grew by %d", live1-live0)
	}
	if mem1 > mem0 {
		t.Errorf("active memory grew by %d bytes", mem1-mem0)
	}
}

// BenchmarkAddEval is the cost of one binding round trip: a 1-element add,
// its evaluation and the frees.
func BenchmarkAddEval(b *testing.B) {
	be := mlxBackend(b)
	x := tensor.FullOn(be, []int{1}, 1, tensor.Float32)
	defer x.Free()
	b.ResetTimer()
	for b.Loop() {
		y := be.Binary(tensor.OpAdd, x, x, []int{1})
		be.Eval(y)
		y.Free()
	}
}

// TestBackendMemoryInfo checks the Backend's PeakMemory and ClearCache
// methods (what generate.MemoryInfo asks for): the peak covers a freshly
// evaluated 4 MiB array, and ClearCache empties the allocator's cache of
// the buffer that array returned to it.
func TestBackendMemoryInfo(t *testing.T) {
	be := mlxBackend(t)
	var mi interface {
		PeakMemory() (uint64, error)
		ClearCache() error
	} = be
	if err := ResetPeakMemory(); err != nil {
		t.Fatal(err)
	}
	a := tensor.FullOn(be, []int{1 << 20}, 1, tensor.Float32)
	tensor.Eval(a)
	peak, err := mi.PeakMemory()
	if err != nil {
		t.Fatal(err)
	}
	if peak < 4<<20 {
		t.Errorf("peak %d bytes with a 4 MiB array live", peak)
	}
	a.Free()
	Do(func() {}) // run the queued release
	if err := mi.ClearCache(); err != nil {
		t.Fatal(err)
	}
	if c, err := CacheMemory(); err != nil || c != 0 {
		t.Errorf("cache memory after ClearCache: %d bytes (%v)", c, err)
	}
}
