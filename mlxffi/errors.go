package mlxffi

import (
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Error is an MLX failure: the message MLX's error handler received. The
// raw API (Do bodies, Compile, LoadSafetensors) returns or panics with it;
// the Backend wraps it in a *tensor.Error.
type Error struct {
	Msg string
}

// Error returns MLX's message with an "mlx: " prefix.
func (e *Error) Error() string { return "mlx: " + e.Msg }

var (
	errMu   sync.Mutex
	lastErr string
)

// installErrorHandler replaces mlx-c's default handler, which prints and
// exits the process, with one that records the message; the entry point
// that failed then returns non-zero and ck turns the record into an *Error.
func installErrorHandler() {
	cb := purego.NewCallback(func(msg *byte, _ uintptr) {
		m := goString(msg)
		errMu.Lock()
		lastErr = m
		errMu.Unlock()
	})
	Do(func() { mlx_set_error_handler(cb, 0, 0) })
}

func takeLastError() string {
	errMu.Lock()
	defer errMu.Unlock()
	m := lastErr
	lastErr = ""
	return m
}

// ck panics with the recorded MLX error when an entry point returned a
// non-zero status. It runs on the worker.
func ck(rc int32) {
	if debugThreads {
		assertWorkerThread()
	}
	if rc != 0 {
		m := takeLastError()
		if m == "" {
			m = "mlx-c call failed without a message"
		}
		panic(&Error{Msg: m})
	}
}

// ckHandle panics when a constructor returned a null handle.
func ckHandle(h uintptr) uintptr {
	if debugThreads {
		assertWorkerThread()
	}
	if h == 0 {
		m := takeLastError()
		if m == "" {
			m = "mlx-c returned a null handle"
		}
		panic(&Error{Msg: m})
	}
	return h
}

func assertWorkerThread() {
	if t := threadID(); t != 0 && int64(t) != mlxThread.tid.Load() {
		panic("mlxffi: MLX called off the MLX thread (use mlxffi.Do)")
	}
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// mlxString converts and frees an mlx_string.
func mlxString(s uintptr) string {
	defer mlx_string_free(s)
	return goString(mlx_string_data(s))
}
