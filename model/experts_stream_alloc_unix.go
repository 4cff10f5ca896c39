//go:build unix

package model

import "syscall"

// expertMemory returns n bytes for an expert's read buffers outside the
// Go heap (anonymous pages, back to the OS at once when freed, so the
// cache's resident bytes are what the process holds) and the function
// that frees them.
func expertMemory(n int) ([]byte, func()) {
	if n == 0 {
		return nil, func() {}
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n), func() {}
	}
	return b, func() { _ = syscall.Munmap(b) }
}
