// Package tensortest holds test helpers for code written against package
// tensor: a leak check on the count of live arrays.
package tensortest

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// NoLeaks records the number of live arrays and returns a function that
// fails t if, when it runs, more are alive. Use it as
//
//	defer tensortest.NoLeaks(t)()
//
// Tests using it must not run in parallel with other tensor users, since
// the count is process-wide.
func NoLeaks(t testing.TB) func() {
	t.Helper()
	before := tensor.LiveArrays()
	return func() {
		t.Helper()
		if after := tensor.LiveArrays(); after > before {
			t.Errorf("leaked %d arrays (live %d → %d)", after-before, before, after)
		}
	}
}
