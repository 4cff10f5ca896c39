//go:build !linux

package mlxffi

// threadID returns 0 off Linux, where this package reads no OS thread id.
// onWorker then recognises the MLX worker by its goroutine id (curGoid),
// and the mlxdebug off-thread check (assertWorkerThread) checks nothing.
func threadID() int { return 0 }
