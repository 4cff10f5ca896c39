package cpu

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The persistent worker pool behind parallelFor: workers() − 1 goroutines
// that live for the process and take chunks of each parallel call, so a
// decode step's few hundred parallel kernels pay neither a goroutine
// start nor an OS-thread wake-up each. After a call a worker spins waiting
// for the next (poolSpin at first, longer while it keeps being woken soon
// after parking: see nextSpin), then parks until woken.

// poolOn is false when the environment sets MLXGO_CPU_POOL=off: every
// parallel call then starts goroutines of its own, as before the pool
// (for measuring what the pool is worth).
var poolOn = os.Getenv("MLXGO_CPU_POOL") != "off"

// poolSpin is how long an idle worker polls for the next call before it
// parks, at first; the caller spins as long for its workers' chunks.
const poolSpin = 100 * time.Microsecond

// poolSpinMax bounds a worker's adaptive spin. Waking a parked worker
// costs an OS-thread wake-up, which on a virtual machine took 0.4 ms on
// average (a halted vCPU is rescheduled by the host) — longer than most
// gaps between a decode step's kernels — so a worker that parks and is
// woken again soon after doubles its spin (up to poolSpinMax), and one
// that stayed parked for longer than poolSpinIdle (no work coming: an
// idle server) goes back to poolSpin.
const (
	poolSpinMax  = 2 * time.Millisecond
	poolSpinIdle = 50 * time.Millisecond
)

// nextSpin is a worker's spin after it was parked for parked, having
// spun for spin before parking.
func nextSpin(spin, parked time.Duration) time.Duration {
	switch {
	case parked > poolSpinIdle:
		return poolSpin
	case parked < poolSpinMax:
		return min(2*spin, poolSpinMax)
	}
	return spin
}

// poolJob is one parallelFor call: its chunks are claimed one at a time
// by the workers and the caller.
type poolJob struct {
	f      func(lo, hi int)
	n      int
	step   int
	chunks int64
	next   atomic.Int64 // the next unclaimed chunk
	done   atomic.Int64 // chunks returned (normally or by panic)
	perr   atomic.Pointer[any]
	waiter atomic.Bool   // the caller is parked on fin
	fin    chan struct{} // signalled once the last chunk returns, if waiter
}

// claim returns the index of an unclaimed chunk, or −1 when none is left.
func (j *poolJob) claim() int64 {
	for {
		i := j.next.Load()
		if i >= j.chunks {
			return -1
		}
		if j.next.CompareAndSwap(i, i+1) {
			return i
		}
	}
}

// runChunk runs chunk i, recording a panic instead of propagating it.
func (j *poolJob) runChunk(i int64) {
	defer func() {
		if r := recover(); r != nil {
			j.perr.CompareAndSwap(nil, &r)
		}
		if j.done.Add(1) == j.chunks && j.waiter.Load() {
			select {
			case j.fin <- struct{}{}:
			default:
			}
		}
	}()
	lo := int(i) * j.step
	j.f(lo, min(lo+j.step, j.n))
}

// drain runs unclaimed chunks until none is left.
func (j *poolJob) drain() {
	for i := j.claim(); i >= 0; i = j.claim() {
		j.runChunk(i)
	}
}

// workPool is the pool; mu is held by the one caller whose job it runs.
type workPool struct {
	mu      sync.Mutex
	startMu sync.Mutex
	started atomic.Int32
	cur     atomic.Pointer[poolJob]
	gen     atomic.Uint64
	sleep   []*poolWorker
}

// poolWorker is one worker's parking state.
type poolWorker struct {
	parked atomic.Bool
	wake   chan struct{}
	wokeAt atomic.Int64 // when a caller last woke it (Unix ns)
}

// poolWakes counts the wake-ups of parked workers and poolWakeNanos sums
// how long each took to start running (PoolWakes).
var poolWakes, poolWakeNanos atomic.Int64

// PoolWakes reports how many times this process's parallel kernels had to
// wake a parked worker and the total time from those wake-ups to the
// worker running, for benchmarks: each wake-up is an OS-thread wake, and
// until the worker runs the call's chunks run on the caller alone.
func PoolWakes() (n int64, latency time.Duration) {
	return poolWakes.Load(), time.Duration(poolWakeNanos.Load())
}

// thePool is the process's worker pool.
var thePool workPool

// grow starts workers until there are n.
func (p *workPool) grow(n int) {
	if int(p.started.Load()) >= n {
		return
	}
	p.startMu.Lock()
	defer p.startMu.Unlock()
	for int(p.started.Load()) < n {
		w := &poolWorker{wake: make(chan struct{}, 1)}
		p.sleep = append(p.sleep, w)
		p.started.Add(1)
		go p.loop(w, p.gen.Load())
	}
}

// run runs f's chunks on the pool and the calling goroutine and reports
// true, or reports false (running nothing) when the pool is busy.
func (p *workPool) run(n, step, chunks int, f func(lo, hi int)) bool {
	if !poolOn || !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	p.grow(chunks - 1)
	j := &poolJob{f: f, n: n, step: step, chunks: int64(chunks), fin: make(chan struct{}, 1)}
	p.cur.Store(j)
	p.gen.Add(1)
	p.startMu.Lock()
	ws := p.sleep
	p.startMu.Unlock()
	woken := 0
	for _, w := range ws {
		if woken >= chunks-1 {
			break
		}
		if w.parked.Load() {
			w.wokeAt.Store(time.Now().UnixNano())
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		woken++
	}
	j.drain()
	// wait for the chunks the workers took: spin briefly, then park
	var t0 time.Time
	for k := 0; j.done.Load() < j.chunks; k++ {
		if k&63 == 63 {
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > poolSpin {
				j.waiter.Store(true)
				if j.done.Load() < j.chunks {
					<-j.fin
				}
				break
			}
		}
	}
	p.cur.Store(nil) // let f be collected
	if e := j.perr.Load(); e != nil {
		panic(*e)
	}
	return true
}

// loop is a worker: it runs the chunks of every new job, spinning after
// each (poolSpin, adapted by nextSpin) before it parks.
func (p *workPool) loop(w *poolWorker, seen uint64) {
	spin := poolSpin
	for {
		// wait for a generation after seen
		var t0 time.Time
		for k := 0; p.gen.Load() == seen; k++ {
			if k&63 != 63 {
				continue
			}
			if k&1023 == 1023 {
				// a spinning worker holds a P: let the process's other
				// goroutines (a server's request handlers) run meanwhile
				runtime.Gosched()
			}
			if t0.IsZero() {
				t0 = time.Now()
				continue
			}
			if time.Since(t0) <= spin {
				continue
			}
			w.parked.Store(true)
			if p.gen.Load() == seen {
				parkedAt := time.Now()
				<-w.wake
				now := time.Now()
				if p.gen.Load() != seen { // not a stale wake-up left in the channel
					poolWakes.Add(1)
					poolWakeNanos.Add(max(0, now.UnixNano()-w.wokeAt.Load()))
				}
				spin = nextSpin(spin, now.Sub(parkedAt))
			}
			w.parked.Store(false)
			t0 = time.Time{}
		}
		seen = p.gen.Load()
		if j := p.cur.Load(); j != nil {
			j.drain()
		}
		// yield after each call's chunks too: a decode step runs kernels
		// back to back, so a request handler would otherwise wait for the
		// scheduler's preemption (10 ms) before it got a processor
		runtime.Gosched()
	}
}
