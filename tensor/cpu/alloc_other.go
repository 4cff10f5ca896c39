//go:build !linux

package cpu

func allocBytes(size int) ([]byte, func([]byte)) { return heapBytes(size), nil }

// dropPages is a no-op off Linux (see alloc_linux.go).
func dropPages([]byte) {}
