package cpu

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// The buffer pool keeps freed large buffers for reuse. Without it every
// intermediate of a step (a 262,144-logit softmax, a prefill activation)
// costs a fresh mapping or a large Go allocation, then page faults and
// zeroing by the kernel — about five times the arithmetic for a
// vocabulary-sized elementwise op. A decode step makes the same shapes step
// after step, so buffers are keyed by their exact rounded size. Reused
// buffers are cleared before they are handed out (callers get zeroed
// memory either way). The pool holds at most poolLimit bytes; ClearCache
// empties it, as MLX's allocator cache does. Small buffers (a decode
// step's activations are a few KiB each, a few megabytes in all) are
// pooled too, in power-of-two classes: from the Go heap each time they
// cost garbage collection and, as the runtime hands freed pages back,
// hundreds of page faults per step.
const (
	poolMin   = 64 << 10  // smaller buffers round up to a power of two (at least poolSmall)
	poolSmall = 64        // the smallest class
	poolQuant = 64 << 10  // larger pooled sizes round up to this
	poolLimit = 512 << 20 // bytes kept for reuse at most
)

type pooledBuf struct {
	data    []byte // full capacity (at least the class size)
	release func([]byte)
}

var pool struct {
	mu    sync.Mutex
	free  map[int][]pooledBuf
	bytes int
}

var (
	liveBytes atomic.Int64 // bytes of buffers handed out and not yet released
	peakBytes atomic.Int64
)

// poolSize is the capacity a pooled request of size bytes gets.
func poolSize(size int) int {
	if size < poolMin {
		return max(poolSmall, 1<<bits.Len(uint(size-1)))
	}
	return (size + poolQuant - 1) / poolQuant * poolQuant
}

// getBuffer returns zeroed memory for size bytes and the function that
// gives it back.
func getBuffer(size int) ([]byte, func([]byte)) {
	if size == 0 {
		return heapBytes(0), nil
	}
	c := poolSize(size)
	noteLive(int64(c))
	pool.mu.Lock()
	if l := pool.free[c]; len(l) > 0 {
		pb := l[len(l)-1]
		pool.free[c] = l[:len(l)-1]
		pool.bytes -= c
		pool.mu.Unlock()
		clear(pb.data[:c])
		return pb.data[:size], pooledRelease(c, pb.release)
	}
	pool.mu.Unlock()
	data, release := allocBytes(c)
	return data[:size], pooledRelease(c, release)
}

// pooledRelease wraps the underlying release so a buffer of pooled size c
// goes back to the pool when there is room, and to its allocator otherwise.
func pooledRelease(c int, release func([]byte)) func([]byte) {
	return func(d []byte) {
		d = d[:cap(d)]
		liveBytes.Add(-int64(c))
		pool.mu.Lock()
		if pool.bytes+c <= poolLimit {
			if pool.free == nil {
				pool.free = map[int][]pooledBuf{}
			}
			pool.free[c] = append(pool.free[c], pooledBuf{data: d, release: release})
			pool.bytes += c
			pool.mu.Unlock()
			return
		}
		pool.mu.Unlock()
		if release != nil {
			release(d)
		}
	}
}

func noteLive(n int64) {
	v := liveBytes.Add(n)
	for {
		p := peakBytes.Load()
		if v <= p || peakBytes.CompareAndSwap(p, v) {
			return
		}
	}
}

// scratchPool recycles a kernel's per-worker scratch buffers of T (a
// sync.Pool underneath), so kernels called for every layer of every step
// do not allocate their scratch afresh each call.
type scratchPool[T any] struct{ p sync.Pool }

// get returns a buffer of n values; its contents are stale. Give it back
// with put.
func (s *scratchPool[T]) get(n int) *[]T {
	if p, ok := s.p.Get().(*[]T); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]T, n)
	return &b
}

// put returns a buffer from get for reuse.
func (s *scratchPool[T]) put(b *[]T) { s.p.Put(b) }

// sizedScratch is a scratchPool of float32 per power-of-two size class, for
// callers whose buffer sizes vary from call to call (one pool would hand
// out and drop too-small buffers).
type sizedScratch struct{ c [48]scratchPool[float32] }

// get returns a buffer of n float32 (stale contents); give it back with put.
func (s *sizedScratch) get(n int) *[]float32 {
	c := bits.Len(uint(n))
	b := s.c[c].get(1 << c)
	*b = (*b)[:n]
	return b
}

// put returns a buffer from get for reuse.
func (s *sizedScratch) put(b *[]float32) { s.c[bits.Len(uint(cap(*b)))-1].put(b) }

// ClearCache returns every pooled buffer to the operating system (or the
// Go heap). Generation calls it between prefill chunks through
// generate.MemoryInfo.
func (be *Backend) ClearCache() error {
	pool.mu.Lock()
	free := pool.free
	pool.free = nil
	pool.bytes = 0
	pool.mu.Unlock()
	for _, l := range free {
		for _, pb := range l {
			if pb.release != nil {
				pb.release(pb.data)
			}
		}
	}
	return nil
}

// PeakMemory reports the most bytes of buffers (weights, caches,
// activations, each counted at its pooled size) alive at once since the
// process started.
func (be *Backend) PeakMemory() (uint64, error) { return uint64(peakBytes.Load()), nil }

// PooledBytes reports the bytes held for reuse; for tests and stats.
func (be *Backend) PooledBytes() int {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	return pool.bytes
}
