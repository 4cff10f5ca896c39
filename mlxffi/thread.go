package mlxffi

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mlxgo/mlxgo/tensor"
)

// The MLX thread. MLX keeps its default device and stream, and the compile
// caches, in thread-local state, so every MLX call of this package runs on
// one goroutine locked to one OS thread (the worker). Callers on any
// goroutine hand the worker a closure and wait for it (Do); a closure
// typically makes several C calls, so one Backend method costs one
// hand-off, not one per C call. Frees are queued and run at the start of
// the next hand-off, so freeing costs no hand-off at all.
//
// Code already running on the worker (a closure given to Do or Run, or a
// compiled function's body, called back by MLX during tracing) may call Do
// again: it runs inline, with no hand-off. That is what makes
// Backend.Run pay off: a whole decode step handed over once runs its
// hundreds of tensor ops inline instead of one hand-off each.
//
// Tensor scopes belong to goroutines (see tensor.Scope), and the arrays
// of every Backend method are made on the worker, so the worker runs each
// closure under tensor.RunAs for the goroutine that handed it over: arrays
// made there, and scopes opened there, are that goroutine's.

type worker struct {
	mu       sync.Mutex
	req      chan func()
	done     chan any
	tid      atomic.Int64 // OS thread id of the worker (debug checks)
	goid     atomic.Int64 // goroutine id of the worker, for re-entrant calls
	ready    atomic.Bool  // the worker runs
	reenter  atomic.Int32 // > 0 while the worker runs Go code (a closure or an MLX callback)
	freeMu   sync.Mutex
	toFree   []uintptr
	freeSpin []uintptr
}

var mlxThread worker

const maxQueuedFrees = 4096

func startWorker() {
	mlxThread.req = make(chan func())
	mlxThread.done = make(chan any)
	ready := make(chan struct{})
	go mlxThread.loop(ready)
	<-ready
	mlxThread.ready.Store(true)
}

func (w *worker) loop(ready chan struct{}) {
	runtime.LockOSThread() // never unlocked: the thread holds MLX's state
	w.goid.Store(curGoid())
	w.tid.Store(int64(threadID()))
	close(ready)
	for f := range w.req {
		w.reenter.Add(1)
		p := runRecover(f)
		w.reenter.Add(-1)
		w.done <- p
	}
}

func runRecover(f func()) (p any) {
	defer func() { p = recover() }()
	mlxThread.drainFrees()
	f()
	return nil
}

// onWorker reports whether the calling goroutine is the worker. When the
// worker is idle it costs one atomic load; while the worker runs a closure
// it asks for the caller's identity: on Linux the OS thread id (one
// system call; the worker is locked to its thread and a
// locked thread runs no other goroutine, so the thread identifies the
// goroutine), elsewhere the goroutine id parsed from a stack header.
func (w *worker) onWorker() bool {
	if w.reenter.Load() == 0 {
		return false
	}
	if t := threadID(); t != 0 {
		return int64(t) == w.tid.Load()
	}
	return curGoid() == w.goid.Load()
}

// Do runs f on the MLX thread and waits for it. A panic inside f is
// re-raised on the caller's goroutine (the worker survives it). Called
// from code already running on the MLX thread, it runs f inline. It loads
// the library first if needed and panics with Load's error when that
// fails. f must not wait for other goroutines' MLX work: they queue
// behind it.
func Do(f func()) {
	w := &mlxThread
	if !w.ready.Load() {
		if err := Load(); err != nil {
			panic(err)
		}
	}
	if w.onWorker() {
		w.drainFrees()
		f()
		return
	}
	// The worker makes the arrays of f (tensor.NewArray runs there), so it
	// acts for the caller's scopes while f runs: they adopt those arrays
	// as if the caller had made them.
	owner := tensor.CurrentScopeOwner()
	w.mu.Lock()
	w.req <- func() { tensor.RunAs(owner, f) }
	p := <-w.done
	w.mu.Unlock()
	if p != nil {
		panic(p)
	}
}

// queueFree schedules an mlx_array_free for the next hand-off to the
// worker; it flushes at once when many are pending so memory stays bounded.
func (w *worker) queueFree(h uintptr) {
	if h == 0 {
		return
	}
	w.freeMu.Lock()
	w.toFree = append(w.toFree, h)
	n := len(w.toFree)
	w.freeMu.Unlock()
	if n >= maxQueuedFrees {
		Do(func() {})
	}
}

// drainFrees frees the queued handles; it runs on the worker.
func (w *worker) drainFrees() {
	w.freeMu.Lock()
	if len(w.toFree) == 0 {
		w.freeMu.Unlock()
		return
	}
	w.toFree, w.freeSpin = w.freeSpin[:0], w.toFree
	w.freeMu.Unlock()
	for _, h := range w.freeSpin {
		mlx_array_free(h)
	}
	clear(w.freeSpin)
}

// curGoid parses the current goroutine's id from its stack header (a
// runtime.Stack call, far dearer than gettid). It identifies the worker where no thread id is available.
func curGoid() int64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	b := bytes.TrimPrefix(buf[:n], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		id, _ := strconv.ParseInt(string(b[:i]), 10, 64)
		return id
	}
	return -1
}
