//go:build mlxdebug

package mlxffi

// debugThreads turns on the check that entry points whose result goes
// through ck or ckHandle run on the MLX thread (build with -tags mlxdebug;
// Linux only, where threadID is known).
const debugThreads = true
