//go:build mlxdebug && linux

package mlxffi

import "testing"

// TestDebugDetectsOffThreadCall: with -tags mlxdebug, a checked entry point
// used outside Do panics instead of touching another thread's MLX state.
func TestDebugDetectsOffThreadCall(t *testing.T) {
	mlxBackend(t)
	defer func() {
		if recover() == nil {
			t.Fatal("an off-thread call was not detected")
		}
	}()
	ck(0) // the test goroutine can never be on the locked MLX thread
}
