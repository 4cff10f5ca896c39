//go:build linux

package cpu

import (
	"syscall"
	"unsafe"
)

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

// dropPages asks the kernel to reclaim the whole pages inside b, memory
// this process no longer reads (MADV_PAGEOUT, Linux 5.4+; a no-op where
// it is missing). Reclaiming keeps the bytes: clean file pages (a borrowed
// checkpoint's mmap) leave the resident set and come back from the file if
// read again; anonymous ones stay unless there is swap. Pages also mapped
// by another process, and partial pages at the ends, stay.
func dropPages(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(syscall.Getpagesize())
	base := uintptr(unsafe.Pointer(&b[0]))
	start := (base + page - 1) &^ (page - 1)
	end := (base + uintptr(len(b))) &^ (page - 1)
	if end <= start {
		return
	}
	lo := int(start - base)
	_ = syscall.Madvise(b[lo:lo+int(end-start)], madvPageout)
}

// madvPageout is MADV_PAGEOUT (not in package syscall).
const madvPageout = 21
