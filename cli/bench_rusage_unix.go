//go:build unix

package main

import (
	"runtime"
	"syscall"
)

// peakRSS is the process's peak resident memory in bytes (0: unknown): the
// peak-memory figure of backends that keep no allocator statistics.
func peakRSS() uint64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil || ru.Maxrss <= 0 {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return uint64(ru.Maxrss) // bytes there
	}
	return uint64(ru.Maxrss) * 1024 // kilobytes on Linux and the BSDs
}
