//go:build !unix

package main

// peakRSS is unknown on this system.
func peakRSS() uint64 { return 0 }
