package mlxffi

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// runGraph is a small forward-pass-like chain of ops (matmul, softmax,
// elementwise, reductions, a slice) whose result is read back.
func runGraph(be tensor.Backend) []byte {
	var out []byte
	tensor.WithScope(func() []*tensor.Array {
		x := tensor.FromBytesOn(be, le32(0.5, -1, 2, 0.25, 3, -0.75, 1.5, 0), []int{2, 4}, tensor.Float32, false)
		w := tensor.FromBytesOn(be, le32(1, 2, -1, 0.5, 0, 1, 0.25, -2, 3, 1, 1, 1), []int{4, 3}, tensor.Float32, false)
		h := tensor.Matmul(x, w)
		h = tensor.Softmax(tensor.Add(h, tensor.Exp(tensor.Neg(h))), -1)
		h = tensor.SliceAxis(h, 1, 1, 3)
		s := tensor.Sum(h, []int{-1}, true)
		out = tensor.Concatenate([]*tensor.Array{h, s}, -1).Bytes()
		return nil
	})
	return out
}

// TestRunSameResults: ops made inside Run give the bytes the same ops give
// outside it, and Run leaks no arrays.
func TestRunSameResults(t *testing.T) {
	be := mlxBackend(t)
	want := runGraph(be)
	live := tensor.LiveArrays()
	var got []byte
	be.Run(func() { got = runGraph(be) })
	if !bytes.Equal(got, want) {
		t.Fatalf("inside Run: %v, outside: %v", got, want)
	}
	if n := tensor.LiveArrays(); n != live {
		t.Fatalf("live arrays %d after Run, %d before", n, live)
	}
}

// TestRunOnWorkerThread: f runs on the MLX thread itself (so ops made in
// it are inline there), not on the caller's goroutine.
func TestRunOnWorkerThread(t *testing.T) {
	be := mlxBackend(t)
	tid := threadID()
	if tid == 0 {
		t.Skip("no thread ids on this OS")
	}
	var inside int
	onW := false
	be.Run(func() { inside, onW = threadID(), mlxThread.onWorker() })
	if int64(inside) != mlxThread.tid.Load() || !onW {
		t.Fatalf("Run's f ran on thread %d (onWorker %v), MLX thread is %d", inside, onW, mlxThread.tid.Load())
	}
	if mlxThread.onWorker() {
		t.Fatal("the test goroutine claims to be the MLX worker")
	}
}

// TestRunPanicSurfacesAsError: a tensor failure, an MLX failure and a
// plain Go panic inside Run all reach the caller as *tensor.Error panics,
// and the MLX thread keeps working afterwards.
func TestRunPanicSurfacesAsError(t *testing.T) {
	be := mlxBackend(t)
	live := tensor.LiveArrays()
	cases := []struct {
		name string
		f    func()
		is   error
		msg  string
	}{
		{"tensor", func() {
			a := tensor.FullOn(be, []int{2, 3}, 1, tensor.Float32)
			defer a.Free()
			tensor.Matmul(a, a) // [2,3]x[2,3]: shape error
		}, tensor.ErrShape, ""},
		{"mlx", func() {
			a := tensor.FullOn(be, []int{2, 3}, 1, tensor.Float32)
			defer a.Free()
			sh := []int32{4}
			var r uintptr
			ck(mlx_reshape(&r, hOf(a), &sh[0], 1, be.stream)) // 6 elements into [4]: MLX fails
		}, tensor.ErrBackend, ""},
		{"go", func() { panic("boom in Run") }, nil, "boom in Run"},
		{"runtime", func() {
			var m map[string]int
			m["x"] = 1 // assignment to a nil map
		}, nil, "nil map"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p any
			func() {
				defer func() { p = recover() }()
				be.Run(c.f)
			}()
			te, ok := p.(*tensor.Error)
			if !ok {
				t.Fatalf("Run panicked with %T %v, want *tensor.Error", p, p)
			}
			if c.is != nil && !errors.Is(te, c.is) {
				t.Fatalf("error %v is not %v", te, c.is)
			}
			if c.msg != "" && !strings.Contains(te.Error(), c.msg) {
				t.Fatalf("error %q does not mention %q", te, c.msg)
			}
			// the MLX thread survived: a hand-off and an inline op still work
			if got := runGraph(be); len(got) != 2*3*4 {
				t.Fatalf("after the panic: %d result bytes", len(got))
			}
		})
	}
	if n := tensor.LiveArrays(); n != live {
		t.Fatalf("live arrays %d after the panics, %d before", n, live)
	}
}

// TestRunNested: a Run (and a Do) inside a Run runs inline instead of
// waiting for the MLX thread it is already on (which would deadlock), and
// a failure inside the inner Run can be caught inside the outer one.
func TestRunNested(t *testing.T) {
	be := mlxBackend(t)
	want := runGraph(be)
	done := make(chan struct{})
	var got []byte
	var innerErr error
	depth := 0
	go func() {
		defer close(done)
		be.Run(func() {
			depth++
			be.Run(func() {
				depth++
				Do(func() { depth++ })
				got = runGraph(be)
			})
			innerErr = tensor.Try(func() { be.Run(func() { panic("inner") }) })
		})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("nested Run deadlocked")
	}
	if depth != 3 || !bytes.Equal(got, want) {
		t.Fatalf("nested: depth %d, result %v (want 3, %v)", depth, got, want)
	}
	var te *tensor.Error
	if !errors.As(innerErr, &te) || !strings.Contains(innerErr.Error(), "inner") {
		t.Fatalf("inner panic surfaced as %v", innerErr)
	}
}

// TestRunSerialisesCallers: Runs from many goroutines never overlap, and
// a plain tensor op from another goroutine made while a Run is in
// progress waits for it (it is handed off, never run inline off the MLX
// thread).
func TestRunSerialisesCallers(t *testing.T) {
	be := mlxBackend(t)
	want := runGraph(be)
	var active atomic.Int32
	var overlapped atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for range 8 {
		wg.Go(func() {
			for range 4 {
				be.Run(func() {
					if active.Add(1) > 1 {
						overlapped.Store(true)
					}
					if got := runGraph(be); !bytes.Equal(got, want) {
						errs <- "wrong result inside a concurrent Run"
					}
					time.Sleep(time.Millisecond)
					active.Add(-1)
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if overlapped.Load() {
		t.Fatal("Runs from different goroutines overlapped")
	}

	// an op from another goroutine during a Run completes only after it
	var opDone atomic.Bool
	finished := make(chan struct{})
	var during bool
	be.Run(func() {
		go func() {
			defer close(finished)
			tensor.FullOn(be, []int{3}, 2, tensor.Float32).Free()
			opDone.Store(true)
		}()
		time.Sleep(50 * time.Millisecond)
		during = opDone.Load()
	})
	<-finished
	if during {
		t.Fatal("another goroutine's op ran while a Run held the MLX thread")
	}
}

// BenchmarkAddNoEvalInRun is BenchmarkAddNoEval with the ops made inside
// one Run: the cost of an op without its hand-off.
func BenchmarkAddNoEvalInRun(b *testing.B) {
	be := mlxBackend(b)
	x := tensor.FullOn(be, []int{1}, 1, tensor.Float32)
	defer x.Free()
	be.Run(func() {
		for b.Loop() {
			be.Binary(tensor.OpAdd, x, x, []int{1}).Free()
		}
	})
}
