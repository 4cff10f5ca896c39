//go:build !unix

package kv

// mapFile reads the file into memory where mmap is not available.
func mapFile(path string) ([]byte, func([]byte) error, error) { return readAll(path) }
