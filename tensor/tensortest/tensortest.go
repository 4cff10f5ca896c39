// Package tensortest holds test helpers for code written against package
// tensor: a leak check on the count of live arrays.
package tensortest

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// NoLeaks records the number of live arrays and returns a function that
// fails t if, when it runs, more are alive. Use it as
//
//	defer tensortest.NoLeaks(t)()
//
// Tests using it must not run in parallel with other tensor users, since
// the count is process-wide.
func NoLeaks(t testing.TB) func() {
	t.Helper()
	before := tensor.LiveArrays()
	return func() {
		t.Helper()
		if after := tensor.LiveArrays(); after > before {
			t.Errorf("leaked %d arrays (live %d → %d)", after-before, before, after)
		}
	}
}

// ReadBandwidth measures the machine's memory read bandwidth in GB/s the
// way decode reads weights: a 256 MiB buffer summed by GOMAXPROCS
// goroutines, best of passes. Benchmarks quote their throughput as a
// fraction of it, measured in the same run.
func ReadBandwidth(passes int) float64 {
	buf := make([]uint64, 32<<20)
	for i := range buf {
		buf[i] = uint64(i)
	}
	w := runtime.GOMAXPROCS(0)
	sums := make([]uint64, w)
	best := 0.0
	for range passes {
		t0 := time.Now()
		var wg sync.WaitGroup
		per := len(buf) / w
		for g := range w {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var a0, a1, a2, a3 uint64
				s := buf[g*per : (g+1)*per]
				for i := 0; i+4 <= len(s); i += 4 {
					a0 += s[i]
					a1 += s[i+1]
					a2 += s[i+2]
					a3 += s[i+3]
				}
				sums[g] = a0 + a1 + a2 + a3
			}()
		}
		wg.Wait()
		best = max(best, float64(len(buf)*8)/time.Since(t0).Seconds()/1e9)
	}
	return best
}
