package mlxffi

import (
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestScopesAdoptWorkerArrays: MLX arrays are made on the MLX thread, yet
// each goroutine's scope adopts the arrays of its own ops (handed off one
// by one or inside Run), and only those, while other goroutines do the
// same at once.
func TestScopesAdoptWorkerArrays(t *testing.T) {
	be := mlxBackend(t)
	defer tensortest.NoLeaks(t)()
	const ops = 20
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := range 4 {
		wg.Go(func() {
			s := tensor.NewScope()
			var made []*tensor.Array
			for i := range ops {
				made = append(made, tensor.FullOn(be, []int{2}, float64(g*ops+i), tensor.Float32))
			}
			be.Run(func() {
				inner := tensor.NewScope()
				x := tensor.FullOn(be, []int{2}, 1, tensor.Float32)
				made = append(made, inner.Keep(tensor.AddScalar(x, float64(g))))
				inner.Close() // frees x, made on the MLX thread inside Run
				if !x.Freed() {
					errs <- "a scope opened inside Run did not free its array"
				}
			})
			if s.Len() != len(made) {
				errs <- "a goroutine's scope does not hold exactly the arrays of its own ops"
			}
			if got := made[ops].Float32s(); got[0] != float32(1+g) {
				errs <- "wrong value from the array kept out of Run"
			}
			s.Close()
			for _, a := range made {
				if !a.Freed() {
					errs <- "an array survived its goroutine's Close"
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestNoScopeOnCallerLeavesWorkerArraysUntracked: an op from a goroutine
// with no scope open makes an array nobody adopts, though another
// goroutine holds a scope open meanwhile.
func TestNoScopeOnCallerLeavesWorkerArraysUntracked(t *testing.T) {
	be := mlxBackend(t)
	defer tensortest.NoLeaks(t)()
	s := tensor.NewScope()
	var a *tensor.Array
	done := make(chan struct{})
	go func() {
		defer close(done)
		a = tensor.FullOn(be, []int{2}, 3, tensor.Float32)
	}()
	<-done
	if s.Len() != 0 {
		t.Fatalf("a scope adopted %d arrays of another goroutine's op", s.Len())
	}
	s.Close()
	if a.Freed() {
		t.Fatal("another goroutine's Close freed an untracked array")
	}
	a.Free()
}
