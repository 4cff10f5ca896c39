package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelForCovers checks that parallelFor visits every index exactly
// once in the chunks its split defines, on the pool, with nested calls
// (which take the spawning path) and with several goroutines calling at
// once.
func TestParallelForCovers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	check := func(n, grain int) {
		hits := make([]atomic.Int32, n)
		var calls atomic.Int32
		parallelFor(n, grain, func(lo, hi int) {
			calls.Add(1)
			if lo >= hi {
				t.Errorf("empty chunk [%d, %d)", lo, hi)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
			// a nested call: the pool is busy, so it spawns
			inner := make([]atomic.Int32, 100)
			parallelFor(100, 10, func(a, b int) {
				for i := a; i < b; i++ {
					inner[i].Add(1)
				}
			})
			for i := range inner {
				if inner[i].Load() != 1 {
					t.Errorf("nested index %d visited %d times", i, inner[i].Load())
				}
			}
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("n=%d grain=%d: index %d visited %d times", n, grain, i, hits[i].Load())
			}
		}
		want := min(workers(), (n+grain-1)/grain)
		if want > 1 {
			step := (n + want - 1) / want
			want = (n + step - 1) / step
		}
		if int(calls.Load()) != want {
			t.Fatalf("n=%d grain=%d: %d chunks, want %d", n, grain, calls.Load(), want)
		}
	}
	for _, c := range [][2]int{{1, 1}, {7, 1}, {64, 64}, {1000, 64}, {4097, 16}, {5, 2}} {
		check(c[0], c[1])
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				check(513, 8)
			}
		}()
	}
	wg.Wait()
}

// TestParallelForChunkBounds checks that the chunk boundaries are the
// same whether the pool or the spawning path runs them.
func TestParallelForChunkBounds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	bounds := func() map[[2]int]bool {
		var mu sync.Mutex
		got := map[[2]int]bool{}
		parallelFor(1001, 10, func(lo, hi int) {
			mu.Lock()
			got[[2]int{lo, hi}] = true
			mu.Unlock()
		})
		return got
	}
	a := bounds()
	poolOn = false
	b := bounds()
	poolOn = true
	if len(a) != 3 || len(a) != len(b) {
		t.Fatalf("pool chunks %v, spawned chunks %v", a, b)
	}
	for k := range a {
		if !b[k] {
			t.Fatalf("pool chunk %v not among spawned chunks %v", k, b)
		}
	}
}

// TestParallelForPanic checks that a panic in any chunk reaches the caller
// after the other chunks have returned, and that the pool works after it.
func TestParallelForPanic(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, pool := range []bool{true, false} {
		poolOn = pool
		for bad := range 4 {
			var running atomic.Int32
			func() {
				defer func() {
					if r := recover(); r != "boom" {
						t.Fatalf("pool=%v chunk %d: recovered %v, want boom", pool, bad, r)
					}
					if running.Load() != 0 {
						t.Fatalf("pool=%v: a chunk still running after the panic returned", pool)
					}
				}()
				parallelFor(400, 100, func(lo, hi int) {
					running.Add(1)
					defer running.Add(-1)
					if lo/100 == bad {
						panic("boom")
					}
					for range 1000 {
						runtime.Gosched()
					}
				})
			}()
		}
	}
	poolOn = true
	var sum atomic.Int64
	parallelFor(100, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sum.Add(int64(i))
		}
	})
	if sum.Load() != 4950 {
		t.Fatalf("after panics: sum %d, want 4950", sum.Load())
	}
}

// TestNextSpin checks the worker's adaptive spin: a park shorter than
// poolSpinMax doubles it up to poolSpinMax, a park past poolSpinIdle
// returns it to poolSpin, one in between keeps it.
func TestNextSpin(t *testing.T) {
	s := poolSpin
	for range 10 {
		s = nextSpin(s, 300*time.Microsecond)
	}
	if s != poolSpinMax {
		t.Fatalf("after short parks: spin %v, want %v", s, poolSpinMax)
	}
	if got := nextSpin(s, 10*time.Millisecond); got != s {
		t.Fatalf("after a 10 ms park: spin %v, want it kept at %v", got, s)
	}
	if got := nextSpin(s, time.Second); got != poolSpin {
		t.Fatalf("after an idle second: spin %v, want %v", got, poolSpin)
	}
	if got := nextSpin(poolSpin, 300*time.Microsecond); got != 2*poolSpin {
		t.Fatalf("one short park: spin %v, want %v", got, 2*poolSpin)
	}
}
