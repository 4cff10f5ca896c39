//go:build mlxdebug

package mlxffi

// debugThreads turns on the check that every C call runs on the MLX
// thread (build with -tags mlxdebug).
const debugThreads = true
