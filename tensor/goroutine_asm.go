//go:build (amd64 || arm64) && !tensor_stackgoid

package tensor

// getg returns the address of the calling goroutine's runtime g structure
// (goroutine_amd64.s, goroutine_arm64.s). It is only compared, never
// dereferenced: it tells goroutines apart for the scope stacks at the cost
// of a function call, where parsing the id from runtime.Stack costs
// microseconds on every op. The runtime reuses a g for a new goroutine
// once its goroutine has exited, which is one reason a scope must be
// closed on the goroutine that opened it.
func getg() uintptr

// goroutineKey identifies the calling goroutine among those running now.
func goroutineKey() uintptr { return getg() }
