//go:build linux

package cpu

import "syscall"

// hugeThreshold is the size from which buffers are mapped anonymously and
// advised onto transparent huge pages: weights read once per token on 4 KiB
// pages can make decode collapse on virtual machines (TLB misses).
const hugeThreshold = 1 << 20

const hugePage = 2 << 20

// allocBytes returns zeroed memory of size bytes and the function that
// gives it back (nil when the Go heap owns it).
func allocBytes(size int) ([]byte, func([]byte)) {
	if size < hugeThreshold {
		return heapBytes(size), nil
	}
	// round up to whole huge pages so the kernel can back all of it with them
	mapped := (size + hugePage - 1) &^ (hugePage - 1)
	b, err := syscall.Mmap(-1, 0, mapped, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return heapBytes(size), nil
	}
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE
	return b[:size], func(d []byte) { _ = syscall.Munmap(d[:cap(d)]) }
}
