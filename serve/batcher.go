package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// DefaultBatch is how many requests decode together when Config.Batch is
// 0 (the seed's --batch default).
const DefaultBatch = 8

// DefaultPrefillAlone is Config.PrefillAlone's default on the CPU backend:
// from 4 decoding rows a pass there is bound by arithmetic, so a joining
// prompt's last chunk runs alone (its first token sooner) at little cost
// to theirs. Other backends (a GPU's passes are bound by memory) run every
// decoding row in every pass unless Config.PrefillAlone says otherwise.
const DefaultPrefillAlone = 4

// DefaultShutdownTimeout bounds how long Close lets running rows finish.
const DefaultShutdownTimeout = 10 * time.Second

// BatchStats is /stats.batch: the batched lane's rows and KV pool.
type BatchStats struct {
	Configured    int `json:"configured"`      // rows that decode together (Config.Batch)
	TokenBudget   int `json:"token_budget"`    // tokens one forward pass may take (Config.TokenBudget, resolved)
	ActiveRows    int `json:"active_rows"`     // rows generating now
	PendingRows   int `json:"pending_rows"`    // rows waiting for KV blocks or a free row
	KVBytes       int `json:"kv_bytes"`        // KV storage the pool has allocated
	KVBudgetBytes int `json:"kv_budget_bytes"` // the pool's ceiling (Config.KVBudgetBytes)
	// Blocks is the pool's block accounting summed over layers: held by
	// rows, kept for prefix reuse (evictable), free, in all, the peak, and
	// reserved by admission for the running rows.
	Blocks struct {
		Size     int `json:"size"`
		Used     int `json:"used"`
		Cached   int `json:"cached"`
		Free     int `json:"free"`
		Capacity int `json:"capacity"`
		Peak     int `json:"peak"`
		Reserved int `json:"reserved"`
	} `json:"blocks"`
}

// batchLane is the engine's batched lane: one generate.Batch over a paged
// KV pool, driven by the engine goroutine. Requests join the running
// batch at the next step; the pool is the prompt cache too (finished
// rows leave their blocks for later requests sharing a prefix), under the
// one KV budget.
type batchLane struct {
	e      *engine
	b      *generate.Batch
	pool   *kv.Pool
	budget int // bytes
	// tokenBudget is the tokens per forward pass (laneBudget)
	tokenBudget int
	rows        map[*generate.Row]*laneRow

	mu                       sync.Mutex
	snap                     BatchStats // published after every step, for /stats
	cacheEntries, cacheBytes int        // the pool's prefix cache, published likewise
	held                     []*job     // later jobs of a group, waiting for its first one's prompt
	ssd                      *ssdTier   // the cold tier, or nil
}

// laneRow is one request's state in the lane: its row and the text it
// has delivered.
type laneRow struct {
	j       *job
	row     *generate.Row
	detok   *tokenizer.Detokenizer
	stopper *generate.StopMatcher
	pend    []tokenLP
	stopped bool
	started bool   // the job's first event (with the cached-token count) was sent
	free    func() // frees a media row's embeddings when it is done (or nil)
}

// newBatchLane sizes the pool for the KV budget: one block of every layer
// is measured by a one-token forward pass through a probe pool, and each
// layer gets budget ÷ (bytes of one block of every layer) blocks (storage
// grows on demand up to that).
func newBatchLane(e *engine) (*batchLane, error) {
	cfg := e.cfg
	bs := cfg.BlockSize
	if bs == 0 {
		bs = kv.DefaultBlockSize
	}
	specs, err := poolLayout(cfg)
	if err != nil {
		return nil, err
	}
	per, err := probeBlockBytes(cfg, specs, bs)
	if err != nil {
		return nil, fmt.Errorf("serve: measuring a KV block: %w", err)
	}
	budget := cfg.KVBudgetBytes
	if budget == 0 {
		budget = defaultKVBudget()
	}
	blocks := max(budget/per, 1)
	pc := kv.PoolConfig{BlockSize: bs, Blocks: blocks, Layers: specs}
	var ssd *ssdTier
	if cfg.SSDCacheDir != "" {
		if ssd, err = newSSDTier(cfg, specs, e.log); err != nil {
			return nil, err
		}
		// prefixes the pool evicts are copied out and written off the
		// token loop; copies waiting hold at most a quarter of the budget
		ssd.maxQueued = int64(blocks * per / 4)
		pc.OnEvict = ssd.spill
	}
	pool, err := kv.NewPool(pc)
	if err != nil {
		if ssd != nil {
			ssd.stop()
		}
		return nil, err
	}
	alone := cfg.PrefillAlone
	if be := cfg.Backend; alone == 0 && (be == nil && tensor.Default().Name() == "cpu" || be != nil && be.Name() == "cpu") {
		alone = DefaultPrefillAlone
	}
	bo := generate.BatchOptions{MaxRows: cfg.Batch, TokenBudget: laneBudget(cfg), PrefillRows: cfg.PrefillRows, FillPrefill: cfg.FillPrefill,
		PrefillAlone: max(alone, 0), Backend: cfg.Backend, Pool: pool}
	var l *batchLane
	if ssd != nil {
		// a row restores only files of its own namespace (adapter set)
		bo.Restore = ssd.restore
	}
	b, err := generate.NewBatch(cfg.Model, bo)
	if err != nil {
		pool.Free()
		if ssd != nil {
			ssd.stop()
		}
		return nil, err
	}
	l = &batchLane{e: e, b: b, pool: pool, budget: blocks * per, tokenBudget: bo.TokenBudget, rows: map[*generate.Row]*laneRow{}, ssd: ssd}
	e.log.Info("batched lane", "rows", cfg.Batch, "block_size", bs, "blocks_per_layer", blocks, "kv_budget_bytes", l.budget)
	l.publish()
	return l, nil
}

// DefaultTokenBudget is the batched lane's tokens per forward pass when
// Config.TokenBudget is 0: decode tokens first, then joining prompts in
// chunks, first come first served. With 2048, concurrent prompts that
// arrive together were prefilled in one pass, so every first token came
// after all of their work (8 simultaneous 256-token prompts: TTFT p50
// 7.8–10.9× idle) and running rows stalled for the whole pass; at 256 the
// k-th prompt's first token comes after about k prompts' work (p50 4.8–5×,
// against a floor of 4.5× when prefill is compute bound) and a decoding
// row waits at most one 256-token pass (BenchmarkServeTTFTLoad,
// generate's BenchmarkBatchTTFT1B4bit; BENCHMARKS.md).
const DefaultTokenBudget = 256

// laneBudget is the lane's token budget per pass: Config.TokenBudget, or
// DefaultTokenBudget capped by Config.PrefillChunkSize, never below one
// decode token per row.
func laneBudget(cfg *Config) int {
	n := cfg.TokenBudget
	if n <= 0 {
		n = DefaultTokenBudget
		if cfg.PrefillChunkSize > 0 {
			n = min(n, cfg.PrefillChunkSize)
		}
	}
	return max(n, cfg.Batch)
}

// probeBlockBytes runs one token through a one-block pool and returns the
// bytes one block of every layer takes.
func probeBlockBytes(cfg *Config, specs []kv.LayerSpec, bs int) (int, error) {
	pool, err := kv.NewPool(kv.PoolConfig{BlockSize: bs, Blocks: 1, Layers: specs})
	if err != nil {
		return 0, err
	}
	defer pool.Free()
	caches := pool.NewCaches()
	defer freeCaches(caches)
	var ferr error
	if err := tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		ids := tensor.FromInt32([]int32{0}, []int{1, 1})
		if cfg.Backend != nil {
			ids = tensor.FromInt32On(cfg.Backend, []int32{0}, []int{1, 1})
		}
		var h *tensor.Array
		if h, ferr = cfg.Model.Forward(ids, caches); ferr == nil {
			tensor.Eval(h)
		}
	}); err != nil {
		return 0, err
	}
	if ferr != nil {
		return 0, ferr
	}
	per := 0
	for _, l := range pool.Stats().Layers {
		per += l.BlockBytes
	}
	if per <= 0 {
		return 0, errors.New("the model wrote no KV")
	}
	return per, nil
}

// defaultKVBudget is half the memory the system reports available at
// start (MemAvailable in /proc/meminfo), or 2 GiB where that is unknown.
func defaultKVBudget() int {
	const fallback = 2 << 30
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return fallback
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			if kb, err := strconv.Atoi(string(f[1])); err == nil && kb > 0 {
				return kb << 10 / 2
			}
		}
	}
	return fallback
}

// batchLoop is the engine goroutine with the batched lane: it adds queued
// jobs to the batch while it has room for them (so the bounded channel
// stays the FIFO queue that answers 429 when full), steps the batch and
// turns its events into each job's events.
func (e *engine) batchLoop() {
	l := e.lane
	defer close(e.done)
	defer l.close()
	var deadline time.Time
	for {
		if deadline.IsZero() {
			select {
			case <-e.quit:
				deadline = time.Now().Add(e.cfg.ShutdownTimeout)
				e.failQueued()
				l.failHeld()
			default:
			}
		}
		if !deadline.IsZero() {
			if l.b.Idle() {
				return
			}
			if time.Now().After(deadline) {
				for _, r := range l.rows {
					r.row.Cancel()
				}
			}
		} else {
			l.take(l.b.Idle())
		}
		if l.b.Idle() {
			continue
		}
		evs, err := l.step()
		if err != nil {
			e.log.Error("batch step failed", "err", err)
		}
		for _, ev := range evs {
			l.event(ev, !deadline.IsZero())
		}
		l.publish()
	}
}

// failQueued answers every job still in the channel: the server is
// shutting down.
func (e *engine) failQueued() {
	for {
		select {
		case j := <-e.jobs:
			e.depth.Add(-1)
			j.out.push(event{done: &outcome{err: errShuttingDown}})
		default:
			return
		}
	}
}

// errShuttingDown answers requests the server will not run.
var errShuttingDown = &apiError{status: http.StatusServiceUnavailable, message: "the server is shutting down", typ: "server_error"}

// take moves queued jobs into the batch while it has room (rows running
// plus waiting below its width); when wait is set (the batch is idle) it
// blocks for the first one.
func (l *batchLane) take(wait bool) {
	e := l.e
	for {
		st := l.b.Stats()
		if st.RowsRunning+st.RowsWaiting >= e.cfg.Batch {
			return
		}
		if len(l.held) > 0 { // a group's later jobs, in order, once the first is in
			if !leaderIn(l.held[0]) {
				return
			}
			j := l.held[0]
			l.held = l.held[1:]
			l.add(j)
			continue
		}
		var j *job
		if wait {
			select {
			case j = <-e.jobs:
			case <-e.quit:
				return
			}
			wait = false
		} else {
			select {
			case j = <-e.jobs:
			default:
				return
			}
		}
		e.depth.Add(-1)
		if !leaderIn(j) {
			l.held = append(l.held, j)
			continue
		}
		l.add(j)
	}
}

// leaderIn reports whether j may join: it leads its group or its group's
// first job has its prompt in the pool (or will never get it there).
func leaderIn(j *job) bool {
	a := j.after
	return a == nil || a.row == nil || a.row.Prefilled() || a.row.Done() || a.ctx.Err() != nil
}

// add puts a job in the batch, or answers it at once when it cannot run.
func (l *batchLane) add(j *job) {
	e := l.e
	if j.ctx.Err() != nil { // the client left while queued
		e.cancelled.Add(1)
		j.out.push(event{done: &outcome{err: j.ctx.Err()}})
		return
	}
	if j.fn != nil && j.rowMedia == nil {
		e.runFn(j)
		return
	}
	opts := j.opts
	opts.Caches, opts.OnPrefillDone, opts.SnapshotAt = nil, nil, 0
	if t := l.ssd; t != nil && len(j.prompt)-1 >= t.minTokens && lora.Persistent(opts.CacheNamespace) {
		// the prompt but its last token, as the next request with this
		// prefix and adapter set (or a restarted server) restores it
		prompt, ns := j.prompt, opts.CacheNamespace
		opts.SnapshotAt = len(prompt) - 1
		opts.OnPrefillDone = func(caches []kv.Cache, n int) { t.snapshot(ns, prompt[:n], caches) }
	}
	var row *generate.Row
	var err error
	var free func()
	if j.rowMedia != nil {
		row, free, err = l.addMedia(j, &opts)
	} else {
		row, err = l.b.Add(j.ctx, j.prompt, &opts)
	}
	if err != nil {
		var fe *generate.FitError
		if errors.As(err, &fe) {
			err = &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "context_over_budget",
				message: fmt.Sprintf("the request needs %d tokens of KV (prompt %d + max_tokens %d): %d blocks of %d in a layer that holds %d under the server's KV budget of %d bytes",
					fe.Tokens, len(j.prompt), fe.Tokens-len(j.prompt), fe.Need, fe.BlockSize, fe.Capacity, l.budget)}
		}
		e.errs.Add(1)
		j.out.push(event{done: &outcome{err: err}})
		return
	}
	e.active.Add(1)
	j.row = row
	l.rows[row] = &laneRow{j: j, row: row, detok: e.cfg.Tokenizer.NewDetokenizer(false), stopper: generate.NewStopMatcher(j.stops...), free: free}
}

// step runs one batch step; a panic fails the rows of the step (they are
// cancelled and reaped at the next one), never the server.
func (l *batchLane) step() (evs []generate.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.e.log.Error("panic in batched generation", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error: %v", p)
			for _, r := range l.rows {
				r.row.Cancel()
			}
		}
	}()
	return l.b.Step()
}

// event turns one row's batch event into its job's events.
func (l *batchLane) event(ev generate.Event, shutdown bool) {
	r := l.rows[ev.Row]
	if r == nil {
		return
	}
	if !r.started {
		r.started = true
		r.j.out.push(event{cached: new(ev.Row.Stats().CachedTokens)})
	}
	for _, t := range ev.Tokens {
		if r.stopped {
			break
		}
		r.pend = append(r.pend, tokenLP{ID: t.ID, Logprob: t.Logprob, Top: t.Top})
		text, hit := r.stopper.Add(r.detok.Add(int(t.ID)))
		if text != "" || hit {
			r.j.out.push(event{text: text, tokens: r.pend})
			r.pend = nil
		}
		if hit {
			r.stopped = true
			r.row.Cancel()
		}
	}
	if !ev.Done {
		return
	}
	delete(l.rows, ev.Row)
	l.e.active.Add(-1)
	if r.free != nil {
		r.free()
	}
	st := ev.Row.Stats()
	err := ev.Err
	if err == nil && st.StopReason == generate.StopCancelled && !r.stopped && shutdown {
		err = errShuttingDown
	}
	if !r.stopped && err == nil {
		text, hit := r.stopper.Add(r.detok.Flush())
		if !hit {
			text += r.stopper.Flush()
		}
		r.stopped = hit
		if text != "" || len(r.pend) > 0 {
			r.j.out.push(event{text: text, tokens: r.pend})
		}
	}
	e := l.e
	e.record(st)
	if st.CachedTokens > 0 {
		e.hits.Add(1)
	} else {
		e.misses.Add(1)
	}
	res := outcome{stats: st, stopStr: r.stopper.Matched(), err: err, lane: "batched"}
	if err == errShuttingDown {
		res.reason = "length" // cut off: streams get a finish chunk, then the error
	}
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		e.cancelled.Add(1)
	case err != nil:
		e.errs.Add(1)
	default:
		e.completed.Add(1)
		res.reason = "stop"
		if !r.stopped && st.StopReason == generate.StopLength {
			res.reason = "length"
		}
	}
	r.j.out.push(event{done: &res})
}

// publish snapshots the batch's statistics for /stats (read by handler
// goroutines while the engine goroutine owns the batch).
func (l *batchLane) publish() {
	st := l.b.Stats()
	var s BatchStats
	s.Configured, s.TokenBudget = l.e.cfg.Batch, l.tokenBudget
	s.ActiveRows, s.PendingRows = st.RowsRunning, st.RowsWaiting
	s.KVBytes, s.KVBudgetBytes = st.Blocks.Bytes, l.budget
	s.Blocks.Size = l.pool.BlockSize()
	s.Blocks.Used, s.Blocks.Cached, s.Blocks.Free = st.Blocks.Used, st.Blocks.Cached, st.Blocks.Free
	s.Blocks.Capacity, s.Blocks.Peak, s.Blocks.Reserved = st.Blocks.Capacity, st.PeakBlocks, st.BlocksReserved
	cached := 0
	for _, ls := range st.Blocks.Layers {
		cached += ls.Cached * ls.BlockBytes
	}
	l.mu.Lock()
	l.snap = s
	l.cacheEntries, l.cacheBytes = st.Blocks.PrefixEntries, cached
	l.mu.Unlock()
}

// stats returns the last published snapshot and the prefix cache's
// entries and bytes.
func (l *batchLane) stats() (BatchStats, int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap, l.cacheEntries, l.cacheBytes
}

// failHeld answers the held jobs: the server is shutting down.
func (l *batchLane) failHeld() {
	for _, j := range l.held {
		j.out.push(event{done: &outcome{err: errShuttingDown}})
	}
	l.held = nil
}

// close ends every row (cancelled), frees the batch and the pool and
// waits for the SSD tier's writes.
func (l *batchLane) close() {
	l.failHeld()
	if l.ssd != nil {
		defer l.ssd.stop()
	}
	for row, r := range l.rows {
		r.j.out.push(event{done: &outcome{err: errShuttingDown, reason: "length"}})
		delete(l.rows, row)
		l.e.active.Add(-1)
	}
	l.b.Close()
	l.pool.Free()
}
