package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
)

// job is one generation request waiting for, or running on, the engine.
type job struct {
	ctx    context.Context
	prompt []int32
	opts   generate.Options
	stops  []string
	out    *sink
	// after, when set, is the first job of the group this one belongs to
	// (a request's n choices): on the batched lane it is admitted once
	// that job's prompt is in the pool, so that it starts from the blocks
	// the first computed. row is the job's row there.
	after *job
	row   *generate.Row
	// fn, when set, is work other than generation that needs the model
	// (an embedding's forward pass, say): the engine goroutine runs it in
	// the job's turn (between batch steps on the batched lane) instead of
	// generating, and fn reports through out itself, ending with a done
	// event. A panic in fn fails the job only.
	fn func()
	// rowMedia, when set (a media job's, beside fn), lets the batched lane
	// run the job as a batch row instead of fn: it runs the towers and
	// returns the row's prompt embeddings, a key naming the media (the
	// prefix cache's namespace gets it) and what frees them.
	rowMedia func() (*generate.RowEmbeds, string, func(), error)
}

// tokenLP is one generated token's logprob information.
type tokenLP struct {
	ID      int32
	Logprob float32
	Top     []sampler.TokenLogprob
}

// event is what the engine reports to a request's handler: text that is
// final (stop strings and partial characters already held back), the
// tokens that produced it, and at the end the outcome.
type event struct {
	text   string
	tokens []tokenLP
	done   *outcome
	// cached, on the first event of a job, is how many prompt tokens the
	// prompt cache supplied (known before prefill, so that a stream's
	// opening usage agrees with its closing one).
	cached *int
}

// outcome ends a job.
type outcome struct {
	reason  string // "stop", "length", or "" on error
	stopStr string // the stop string that matched, if any
	stats   generate.Stats
	err     error
	lane    string // "batched" or "serial"
}

// sink is an unbounded event queue from the engine (which never blocks on
// a slow client) to the handler goroutine.
type sink struct {
	mu     sync.Mutex
	evs    []event
	notify chan struct{}
	// onDone, when set, runs once the event carrying the outcome is
	// pushed (the job no longer runs): it releases the job's adapters.
	onDone func()
}

func newSink() *sink { return &sink{notify: make(chan struct{}, 1)} }

func (s *sink) push(e event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	var done func()
	if e.done != nil {
		done, s.onDone = s.onDone, nil
	}
	s.mu.Unlock()
	if done != nil {
		done()
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// drain takes the queued events.
func (s *sink) drain() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.evs
	s.evs = nil
	return out
}

// Stats are the server counters GET /stats reports.
type Stats struct {
	// QueueDepth is the requests waiting: in the queue, and on the
	// batched lane also the rows in the batch waiting for KV blocks
	// (batch.pending_rows).
	QueueDepth    int `json:"queue_depth"`
	QueueCapacity int `json:"queue_capacity"`
	// Active is the requests the engine has taken and not finished: on
	// the batched lane the rows in the batch, running or waiting for
	// blocks (batch.active_rows counts the running ones alone).
	Active        int     `json:"active"`
	Requests      int64   `json:"requests"`
	Completed     int64   `json:"completed"`
	Cancelled     int64   `json:"cancelled"`
	Rejected      int64   `json:"rejected"`
	Errors        int64   `json:"errors"`
	PromptTokens  int64   `json:"prompt_tokens"`
	CachedTokens  int64   `json:"cached_tokens"`
	Generated     int64   `json:"generated_tokens"`
	CacheHits     int64   `json:"prompt_cache_hits"`
	CacheMisses   int64   `json:"prompt_cache_misses"`
	CacheEntries  int     `json:"prompt_cache_entries"`
	CacheBytes    int     `json:"prompt_cache_bytes"`
	DecodeTPS     float64 `json:"decode_tokens_per_sec"`  // the last request's
	PrefillTPS    float64 `json:"prefill_tokens_per_sec"` // the last request's
	AvgDecodeTPS  float64 `json:"avg_decode_tokens_per_sec"`
	UptimeSeconds float64 `json:"uptime_s"`
	// Lane is how requests run: "batched" (Config.Batch > 1: rows decode
	// together over a paged KV pool) or "serial" (one at a time).
	Lane string `json:"lane"`
	// Batch describes the batched lane (nil on the serial one).
	Batch *BatchStats `json:"batch,omitempty"`
	// SSD describes the batched lane's SSD cold tier (nil without one).
	SSD *SSDStats `json:"ssd_cache,omitempty"`
	// Memory is what the process holds: its resident set as the system
	// counts it (mapped weights the kernels touched included), the Go
	// heap in use, and the KV the pool or prompt cache holds.
	Memory MemoryStats `json:"memory"`
}

// engine is the one goroutine that owns the model: requests wait in a
// bounded FIFO and run one at a time.
type engine struct {
	cfg   *Config
	log   *slog.Logger
	jobs  chan *job
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
	pc    *generate.PromptCache
	lane  *batchLane // the batched lane (Config.Batch > 1), else nil
	start time.Time

	// adapters is the LoRA host's server side (nil without
	// Config.Adapters).
	adapters *adapterHost

	depth, active                                   atomic.Int64
	requests, completed, cancelled, rejected, errs  atomic.Int64
	promptToks, cachedToks, genToks, hits, misses   atomic.Int64
	mu                                              sync.Mutex
	lastDecode, lastPrefill, decodeMs, decodeTokens float64
}

func newEngine(cfg *Config, log *slog.Logger) (*engine, error) {
	e := &engine{cfg: cfg, log: log, jobs: make(chan *job, cfg.QueueSize), quit: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	if cfg.Adapters != nil {
		e.adapters = newAdapterHost(cfg.Adapters)
		_, rows := cfg.Model.(generate.RowForwarder)
		e.adapters.perRow = rows || cfg.Batch == 1
	}
	if cfg.Batch > 1 {
		l, err := newBatchLane(e)
		if err != nil {
			return nil, err
		}
		e.lane = l
		go e.batchLoop()
		return e, nil
	}
	if cfg.PromptCacheBytes > 0 {
		e.pc = generate.NewPromptCache(cfg.PromptCacheBytes)
	}
	go e.loop()
	return e, nil
}

// errQueueFull is answered with 429.
var errQueueFull = &apiError{status: http.StatusTooManyRequests, message: "the server is busy: the request queue is full; retry later", typ: "rate_limit_error", code: "queue_full"}

// submit queues j, or fails at once when the queue is full.
func (e *engine) submit(j *job) error {
	if err := e.adapters.acquire(j); err != nil {
		return err
	}
	e.requests.Add(1)
	e.depth.Add(1)
	select {
	case <-e.quit:
		e.depth.Add(-1)
		j.out.push(event{done: &outcome{}}) // releases its adapters
		return errShuttingDown
	default:
	}
	select {
	case e.jobs <- j:
		return nil
	default:
		e.depth.Add(-1)
		e.rejected.Add(1)
		j.out.push(event{done: &outcome{}}) // releases its adapters
		return errQueueFull
	}
}

func (e *engine) close() {
	e.once.Do(func() { close(e.quit) })
	<-e.done
}

func (e *engine) loop() {
	// The goroutine is not locked to a thread: mlxffi runs every MLX call
	// on its own locked thread, and the CPU backend's parallel kernels hand
	// work between goroutines, which a locked thread turns into thread
	// switches (in an early experiment served decode ran at about half the
	// speed of direct Generate with it; no benchmark keeps that comparison).
	defer close(e.done)
	defer func() {
		if e.pc != nil {
			e.pc.Clear()
		}
	}()
	for {
		select {
		case <-e.quit:
			for {
				select {
				case j := <-e.jobs:
					e.depth.Add(-1)
					j.out.push(event{done: &outcome{err: errors.New("the server is shutting down")}})
				default:
					return
				}
			}
		case j := <-e.jobs:
			e.depth.Add(-1)
			if j.ctx.Err() != nil { // the client left while queued
				e.cancelled.Add(1)
				j.out.push(event{done: &outcome{err: j.ctx.Err()}})
				continue
			}
			e.active.Add(1)
			if j.fn != nil {
				e.runFn(j)
			} else {
				e.run(j)
			}
			e.active.Add(-1)
		}
	}
}

// runFn runs a job's fn on the engine goroutine; a panic fails the job.
func (e *engine) runFn(j *job) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("panic in engine work", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			e.errs.Add(1)
			j.out.push(event{done: &outcome{err: fmt.Errorf("internal error: %v", p)}})
		}
	}()
	j.fn()
	e.completed.Add(1)
}

// run generates for one job, reporting to its sink; a panic fails the job
// only.
func (e *engine) run(j *job) {
	var res outcome
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("panic in generation", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res = outcome{err: fmt.Errorf("internal error: %v", p)}
		}
		switch {
		case res.err != nil && errors.Is(res.err, context.Canceled):
			e.cancelled.Add(1)
		case res.err != nil:
			e.errs.Add(1)
		default:
			e.completed.Add(1)
		}
		j.out.push(event{done: &res})
	}()
	res = e.generate(j)
}

func (e *engine) generate(j *job) (res outcome) {
	opts := j.opts
	opts.KVQuant, opts.QuantizedKVStart = e.cfg.KVQuant, e.cfg.QuantizedKVStart
	var taken []kv.Cache
	m := e.cfg.Model
	pc, ns := e.pc, ""
	if len(opts.Adapters) > 0 {
		// the variant whose every pass applies the job's set; its KV lives
		// in the prompt cache under the set's namespace
		m, ns = e.adapters.am.Variant(opts.Adapters), opts.CacheNamespace
	}
	if pc != nil {
		if c, _ := pc.TakeIn(ns, j.prompt); c != nil {
			taken = c
			opts.Caches = c
			e.hits.Add(1)
		} else {
			e.misses.Add(1)
		}
		if e.cfg.SnapshotPrompt {
			opts.OnPrefillDone = func(caches []kv.Cache, n int) {
				snap := make([]kv.Cache, len(caches))
				for i, c := range caches {
					if c != nil {
						snap[i] = c.Clone()
					}
				}
				pc.PutIn(ns, j.prompt[:n], snap)
			}
		}
	}
	j.out.push(event{cached: new(cachedTokens(taken))})
	s, err := generate.Generate(j.ctx, m, j.prompt, &opts)
	if err != nil {
		freeCaches(taken)
		return outcome{err: err}
	}
	defer s.Close()
	detok := e.cfg.Tokenizer.NewDetokenizer(false)
	stopper := generate.NewStopMatcher(j.stops...)
	var pend []tokenLP
	stopped := false
	var genErr error
	for t, err := range s.Tokens() {
		if err != nil {
			genErr = err
			break
		}
		pend = append(pend, tokenLP{ID: t.ID, Logprob: t.Logprob, Top: t.Top})
		text, hit := stopper.Add(detok.Add(int(t.ID)))
		if text != "" || hit {
			j.out.push(event{text: text, tokens: pend})
			pend = nil
		}
		if hit {
			stopped = true
			break
		}
	}
	if !stopped && genErr == nil {
		text, hit := stopper.Add(detok.Flush())
		if !hit {
			text += stopper.Flush()
		}
		stopped = hit
		if text != "" || len(pend) > 0 {
			j.out.push(event{text: text, tokens: pend})
		}
	}
	st := s.Stats()
	e.record(st)
	// Keep the KV for the next request that shares this prefix.
	keep := genErr == nil || errors.Is(genErr, context.Canceled) || errors.Is(genErr, context.DeadlineExceeded)
	switch {
	case pc != nil && keep && len(st.CacheTokens) > 0 && taken != nil:
		pc.PutIn(ns, st.CacheTokens, s.Caches()) // the loop may have swapped entries in place
	case pc != nil && keep && len(st.CacheTokens) > 0:
		pc.PutIn(ns, st.CacheTokens, s.TakeCaches())
	case taken != nil:
		freeCaches(s.Caches())
	}
	res = outcome{stats: st, stopStr: stopper.Matched(), err: genErr, lane: "serial"}
	switch {
	case genErr != nil:
	case stopped || st.StopReason == generate.StopEOS || st.StopReason == generate.StopGrammar:
		res.reason = "stop"
	case st.StopReason == generate.StopLength:
		res.reason = "length"
	default:
		res.reason = "stop"
	}
	return res
}

// cachedTokens is how many tokens pre-warmed caches hold (what
// generate.Stats.CachedTokens will report).
func cachedTokens(cs []kv.Cache) int {
	for _, c := range cs {
		if c != nil {
			return c.Offset()
		}
	}
	return 0
}

// freeCaches frees caches the engine owns.
func freeCaches(cs []kv.Cache) {
	for _, c := range cs {
		if c != nil {
			c.Free()
		}
	}
}

func (e *engine) record(st generate.Stats) {
	e.promptToks.Add(int64(st.PromptTokens))
	e.cachedToks.Add(int64(st.CachedTokens))
	e.genToks.Add(int64(st.GeneratedTokens))
	e.mu.Lock()
	e.lastPrefill = st.PrefillTPS
	if st.GeneratedTokens > 1 {
		e.lastDecode = st.DecodeTPS
		e.decodeMs += st.DecodeMs
		e.decodeTokens += float64(st.GeneratedTokens - 1)
	}
	e.mu.Unlock()
}

func (e *engine) stats() Stats {
	st := Stats{
		QueueDepth: int(e.depth.Load()), QueueCapacity: cap(e.jobs), Active: int(e.active.Load()),
		Requests: e.requests.Load(), Completed: e.completed.Load(), Cancelled: e.cancelled.Load(),
		Rejected: e.rejected.Load(), Errors: e.errs.Load(),
		PromptTokens: e.promptToks.Load(), CachedTokens: e.cachedToks.Load(), Generated: e.genToks.Load(),
		CacheHits: e.hits.Load(), CacheMisses: e.misses.Load(),
		UptimeSeconds: time.Since(e.start).Seconds(),
	}
	if e.pc != nil {
		st.CacheEntries, st.CacheBytes = e.pc.Len(), e.pc.Bytes()
	}
	st.Memory = memoryStats()
	st.Memory.KVBytes = st.CacheBytes
	st.Lane = "serial"
	if e.lane != nil {
		bs, entries, bytes := e.lane.stats()
		st.Batch = &bs
		st.CacheEntries, st.CacheBytes = entries, bytes
		st.Memory.KVBytes = bs.KVBytes
		st.QueueDepth += bs.PendingRows
		st.Lane = "batched"
		if e.lane.ssd != nil {
			ss := e.lane.ssd.snapshotStats()
			st.SSD = &ss
		}
	}
	e.mu.Lock()
	st.DecodeTPS, st.PrefillTPS = e.lastDecode, e.lastPrefill
	if e.decodeMs > 0 {
		st.AvgDecodeTPS = e.decodeTokens / (e.decodeMs / 1000)
	}
	e.mu.Unlock()
	return st
}

// MemoryStats is /stats.memory.
type MemoryStats struct {
	RSSBytes    int64  `json:"rss_bytes"`     // resident set (0 where the system does not say)
	GoHeapBytes uint64 `json:"go_heap_bytes"` // Go heap in use
	KVBytes     int    `json:"kv_bytes"`      // KV storage of the pool (batched lane) or the prompt cache (serial)
}

// memoryStats reads the resident set (Linux: VmRSS in /proc/self/status)
// and the Go heap.
func memoryStats() MemoryStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := MemoryStats{GoHeapBytes: ms.HeapInuse}
	if raw, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						out.RSSBytes = kb << 10
					}
				}
			}
		}
	}
	return out
}
