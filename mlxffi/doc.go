// Package mlxffi binds MLX's C API (mlx-c) with purego, without cgo, and
// provides MLX as a tensor backend: Metal on Apple silicon, and MLX's CPU
// (or CUDA) backend on Linux.
//
// # Loading
//
// Importing the package registers the "mlx" tensor backend and loads
// nothing. libmlxc is opened on first use (Open, New, Load, or any
// function here that talks to MLX), from the first of: $MLXGO_LIBMLXC (a
// file or a directory), /opt/homebrew/lib (macOS), /usr/local/lib,
// /usr/lib, the multiarch lib directory (Linux), the executable's
// directory, and os.UserCacheDir()/mlxgo/lib. libmlx is opened from the
// same directory first when it is there. When none loads, the error wraps
// ErrNotFound and names every place tried. It works with CGO_ENABLED=0
// (purego's fake cgo runtime) and with cgo enabled.
//
// # Threading
//
// MLX keeps its default device and stream, and its compile caches, per
// OS thread. Every MLX call this package makes therefore runs on one
// goroutine locked to one OS thread; Backend methods hand that thread a
// closure and wait, so they are safe to call from any goroutine (calls
// from several goroutines are serialised). Each hand-off costs tens of
// microseconds on a loaded machine (BenchmarkHandoff), so Backend.Run hands over a whole sequence of tensor ops
// at once (a decode step, say): ops made inside it run inline on the MLX
// thread. Code that calls mlx-c entry points itself must do so inside Do
// (or Run). Building with -tags mlxdebug on Linux makes
// every checked entry point panic when it runs off that thread.
//
// # Errors
//
// mlx-c's default error handler prints and exits the process; Load
// replaces it with one that records MLX's message, so a failing entry
// point returns an error instead. Backend methods panic with a
// *tensor.Error wrapping tensor.ErrBackend and that message, as every
// tensor backend does (tensor.Try turns it back into an error); the other
// exported functions return errors and do not panic. Faults that MLX does
// not report through the handler (a crash inside a kernel) still end the
// process, which is why the backend steers around the ones known in MLX's
// CPU kernels (empty sorts and products).
//
// # Ownership
//
// Each tensor.Array of this backend owns one mlx_array and frees it
// exactly once, when the Array is freed (directly or by its Scope); the
// release is queued and done at the MLX thread's next hand-off. Nothing
// relies on finalizers: the Go collector cannot see MLX's memory.
package mlxffi
