package cpu

import (
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// A freed large buffer is reused for the next array of the same size, and
// the reused memory comes back zeroed.
func TestPoolReusesAndZeroes(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	be := Default
	_ = be.ClearCache()
	const n = 300_000 // 1.2 MB of float32: pooled, mmap'd
	a := tensor.FullOn(be, []int{n}, 7, tensor.Float32)
	first := &get(a).buf.data[0]
	a.Free()
	if be.PooledBytes() < n*4 {
		t.Fatalf("pool holds %d bytes after freeing a %d-byte array", be.PooledBytes(), n*4)
	}
	b := tensor.FullOn(be, []int{n}, 0, tensor.Float32) // same size: must reuse the freed buffer
	defer b.Free()
	if &get(b).buf.data[0] != first {
		t.Fatal("same-size array did not reuse the pooled buffer")
	}
	for i, v := range b.Float32s() {
		if v != 0 {
			t.Fatalf("reused buffer not cleared: [%d] = %v", i, v)
		}
	}
	if be.PooledBytes() != 0 {
		t.Fatalf("pool still holds %d bytes after the reuse", be.PooledBytes())
	}
	if p, _ := be.PeakMemory(); p < n*4 {
		t.Fatalf("peak memory %d below one live array of %d bytes", p, n*4)
	}
}

// The pool never holds more than its limit, and ClearCache empties it.
func TestPoolBoundedAndCleared(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	be := Default
	const n = 16 << 20 // 64 MiB float32 arrays
	arrs := make([]*tensor.Array, poolLimit/(n*4)+3)
	for i := range arrs {
		arrs[i] = tensor.FullOn(be, []int{n}, 0, tensor.Float32)
	}
	tensor.Free(arrs...)
	if got := be.PooledBytes(); got > poolLimit {
		t.Fatalf("pool holds %d bytes, limit %d", got, poolLimit)
	}
	if err := be.ClearCache(); err != nil || be.PooledBytes() != 0 {
		t.Fatalf("after ClearCache the pool holds %d bytes (err %v)", be.PooledBytes(), err)
	}
}

// Small buffers are pooled by power-of-two class: a freed one is handed
// out again for any size of its class, cleared, and 64-byte aligned.
func TestPoolSmallClasses(t *testing.T) {
	_ = Default.ClearCache()
	for _, size := range []int{1, 63, 64, 65, 1000, 4096, 40_000, poolMin - 1} {
		d, rel := getBuffer(size)
		if len(d) != size || cap(d) < size {
			t.Fatalf("size %d: got len %d cap %d", size, len(d), cap(d))
		}
		for i := range d {
			d[i] = 0xAB
		}
		first := &d[0]
		rel(d)
		c := poolSize(size)
		if c&(c-1) != 0 || c < size || c < poolSmall {
			t.Fatalf("size %d: class %d is not a power of two at least the size", size, c)
		}
		e, rel2 := getBuffer(c) // the largest size of the class: the same buffer
		if &e[0] != first {
			t.Fatalf("size %d: class %d did not reuse the freed buffer", size, c)
		}
		if uintptr(unsafe.Pointer(&e[0]))%64 != 0 {
			t.Fatalf("size %d: reused buffer not 64-byte aligned", size)
		}
		for i, v := range e {
			if v != 0 {
				t.Fatalf("size %d: reused buffer not cleared at %d", size, i)
			}
		}
		rel2(e)
	}
	_ = Default.ClearCache()
	if Default.PooledBytes() != 0 {
		t.Fatal("ClearCache left small buffers in the pool")
	}
}
