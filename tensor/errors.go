package tensor

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Sentinel errors wrapped by *Error.
var (
	ErrFreed     = errors.New("use of a freed array")
	ErrNil       = errors.New("nil array")
	ErrShape     = errors.New("shape mismatch")
	ErrDType     = errors.New("unsupported dtype")
	ErrArgument  = errors.New("invalid argument")
	ErrNoBackend = errors.New("no tensor backend registered (import github.com/mlxgo/mlxgo/tensor/cpu)")
	ErrBackend   = errors.New("backend failure")
)

// Error is the value tensor operations panic with. Array code reads like
// NumPy, so operations do not return errors; a misuse (shape mismatch,
// freed array) is a programming error that surfaces as a panic carrying an
// *Error, which Try turns back into an error at an API boundary.
type Error struct {
	Op  string // the operation, e.g. "Matmul"
	Err error  // the cause; wraps one of the sentinels above
}

// Error returns "tensor: <op>: <cause>".
func (e *Error) Error() string { return "tensor: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func throw(op string, sentinel error, format string, args ...any) {
	panic(&Error{Op: op, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))})
}

// Try runs f and returns the *Error it panicked with, if any. Other panics
// (runtime errors in a backend, for instance) are converted to errors too,
// with their stack, so nothing panics across an API boundary that uses Try.
func Try(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = recoverToError(r)
		}
	}()
	f()
	return nil
}

// Recover is for deferred use in functions with a named error result:
//
//	func (m *Model) Forward(...) (out *tensor.Array, err error) {
//		defer tensor.Recover(&err)
func Recover(err *error) {
	if r := recover(); r != nil {
		*err = recoverToError(r)
	}
}

func recoverToError(r any) error {
	switch v := r.(type) {
	case *Error:
		return v
	case error:
		var buf [4096]byte
		n := runtime.Stack(buf[:], false)
		return &Error{Op: "panic", Err: fmt.Errorf("%w: %w\n%s", ErrBackend, v, buf[:n])}
	default:
		var buf [4096]byte
		n := runtime.Stack(buf[:], false)
		return &Error{Op: "panic", Err: fmt.Errorf("%w: %v\n%s", ErrBackend, v, buf[:n])}
	}
}

// ---- the default backend ----

var (
	defaultMu      sync.RWMutex
	defaultBackend Backend
	backends       = map[string]func() (Backend, error){}
)

// Register makes a backend constructor available by name (backends call it
// from init). The first registered backend becomes the default unless
// SetDefault chooses another.
func Register(name string, open func() (Backend, error)) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	backends[name] = open
}

// Open returns the named registered backend.
func Open(name string) (Backend, error) {
	defaultMu.RLock()
	open, ok := backends[name]
	defaultMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("tensor: backend %q is not registered (registered: %v)", name, Registered())
	}
	return open()
}

// Registered lists the names of registered backends.
func Registered() []string {
	defaultMu.RLock()
	defer defaultMu.RUnlock()
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	return names
}

// SetDefault sets the backend that creation functions (Zeros, FromFloat32,
// ...) use.
func SetDefault(b Backend) {
	defaultMu.Lock()
	defaultBackend = b
	defaultMu.Unlock()
}

// Default returns the default backend: the one set with SetDefault, else
// "cpu" when registered. It panics with ErrNoBackend when there is none.
func Default() Backend {
	defaultMu.RLock()
	b := defaultBackend
	defaultMu.RUnlock()
	if b != nil {
		return b
	}
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultBackend != nil {
		return defaultBackend
	}
	if open, ok := backends["cpu"]; ok {
		if be, err := open(); err == nil {
			defaultBackend = be
			return be
		}
	}
	panic(&Error{Op: "Default", Err: ErrNoBackend})
}
