//go:build !linux

package cpu

import "time"

// lrCPUTime stands in for the process's CPU time where it is not read:
// wall time since the first call.
func lrCPUTime() time.Duration { return time.Since(lrStart) }

var lrStart = time.Now()
