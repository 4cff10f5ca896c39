//go:build !linux

package cpu

func allocBytes(size int) ([]byte, func([]byte)) { return heapBytes(size), nil }
