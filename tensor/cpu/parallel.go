package cpu

import (
	"runtime"
	"sync"
	"unsafe"
)

// heapBytes returns zeroed Go-heap memory of size bytes aligned to 64 bytes.
func heapBytes(size int) []byte {
	if size == 0 {
		return []byte{}
	}
	raw := make([]uint64, (size+63+64)/8)
	p := uintptr(unsafe.Pointer(&raw[0]))
	skip := int((64 - p%64) % 64)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), len(raw)*8)
	return b[skip : skip+size : skip+size]
}

// workers is the number of goroutines parallel kernels split work over.
func workers() int { return runtime.GOMAXPROCS(0) }

// parallelFor runs f over [0, n) split into at most workers() contiguous
// chunks of at least grain items each; small n runs inline. The chunk
// boundaries depend only on n, grain and workers(), never on which
// goroutine runs a chunk. The chunks run on the persistent worker pool
// (pool.go) and on the calling goroutine; a call made while the pool is
// busy (from inside a chunk, or from another goroutine at the same time)
// runs its chunks on goroutines of its own instead. A panic in any chunk
// reaches the caller, after every chunk it started has returned.
func parallelFor(n, grain int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	w := workers()
	if grain < 1 {
		grain = 1
	}
	chunks := min(w, (n+grain-1)/grain)
	if chunks <= 1 {
		f(0, n)
		return
	}
	step := (n + chunks - 1) / chunks
	chunks = (n + step - 1) / step
	if thePool.run(n, step, chunks, f) {
		return
	}
	spawnFor(n, step, f)
}

// spawnFor runs f over [0, n) in chunks of step items, one goroutine per
// chunk but the last, which runs on the calling goroutine.
func spawnFor(n, step int, f func(lo, hi int)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perr any
	defer func() {
		wg.Wait() // also when the caller's own chunk panicked
		if perr != nil {
			panic(perr)
		}
	}()
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		if hi == n {
			f(lo, hi) // run the last chunk on this goroutine
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					perr = r
					mu.Unlock()
				}
			}()
			f(lo, hi)
		}()
	}
}
