// Package tensor is the array API that mlxgo's model, kv-cache, sampler and
// generation code is written against.
//
// Arrays live on a Backend: the pure-Go CPU backend in tensor/cpu (the
// embedded default) or MLX through mlxffi. Code written against this
// package never names a backend type, so a forward pass reads like mlx-lm's
// Python and runs on either:
//
//	h := tensor.RMSNorm(x, w, 1e-6)
//	scores := tensor.Matmul(q, tensor.SwapAxes(k, -1, -2))
//
// Operations panic with an *Error on misuse (shape mismatch, a freed
// array); API boundaries convert that to an error with Try or Recover.
//
// Memory is owned explicitly: the GC never frees device memory. Every array
// is freed by its owner, either directly with Free or by a Scope that frees
// everything made inside it except what is kept. Scopes are per goroutine:
// an array goes to the innermost open scope of the goroutine that made it
// (none, if that goroutine has no scope open), so goroutines running tensor
// work side by side do not free each other's arrays; a scope is closed on
// the goroutine that opened it. LiveArrays counts arrays not yet freed, so
// tests can assert that nothing leaks.
//
// Lazy backends compute on Eval/AsyncEval; eager ones compute immediately
// and treat both as no-ops, so one generation loop serves both.
package tensor
