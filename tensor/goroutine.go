package tensor

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
)

// stackGoid returns the calling goroutine's id, parsed from the header
// runtime.Stack writes ("goroutine 18 [running]:"). It is the portable
// goroutineKey (goroutine_other.go): it costs microseconds where the
// assembly getg of amd64 and arm64 costs a function call, and NewArray
// asks only while some scope is open.
func stackGoid() uintptr {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	b := bytes.TrimPrefix(buf[:n], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		if id, err := strconv.ParseUint(string(b[:i]), 10, 64); err == nil {
			return uintptr(id)
		}
	}
	panic(&Error{Op: "scope", Err: fmt.Errorf("%w: no goroutine id in %q", ErrBackend, buf[:n])})
}
