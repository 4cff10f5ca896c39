//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"os"
	"syscall"
)

// mapFile maps f read-only. The mapping is shared, so pages come straight
// from the page cache and are dropped under memory pressure instead of
// being swapped, and several processes serving one model share them.
func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, syscall.Munmap, nil
}
