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
// chunks of at least grain items each; small n runs inline.
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
	var wg sync.WaitGroup
	step := (n + chunks - 1) / chunks
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		if hi == n {
			f(lo, hi) // run the last chunk on this goroutine
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}
