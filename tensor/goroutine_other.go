//go:build (!amd64 && !arm64) || tensor_stackgoid

package tensor

// goroutineKey identifies the calling goroutine by its id. (The build tag
// tensor_stackgoid selects this on amd64 and arm64 too, to test it.)
func goroutineKey() uintptr { return stackGoid() }
