package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultMaxRows is how many rows a Batch generates at once when
// BatchOptions.MaxRows is 0 (the seed's --batch default).
const DefaultMaxRows = 8

// BatchOptions configure a Batch.
type BatchOptions struct {
	// MaxRows is the most rows generating at once (default
	// DefaultMaxRows); later rows wait, in the order they were added.
	MaxRows int
	// TokenBudget caps the tokens of one forward pass (default
	// DefaultPrefillChunkSize). Every running row's decode tokens go in
	// each pass (but see PrefillAlone); joining rows' prompts fill what is
	// left, in chunks, so a long prompt never stalls the rows already
	// decoding (chunked prefill).
	TokenBudget int
	// PrefillRows caps how many joining rows' prompt chunks one pass
	// holds (0: as many as the budget has room for). Joiners are served
	// first come, first served either way: the earliest takes what the
	// budget leaves after the decode tokens, the next what it leaves, and
	// so on; PrefillRows 1 gives the budget's rest to the earliest alone.
	PrefillRows int
	// FillPrefill lets a pass in which a joining row's prompt ends (its
	// first token sampled) also hold chunks of later joiners that do not
	// end theirs. By default it holds only chunks that end their prompts
	// too: a pass's tokens all come out when it ends, so a later joiner's
	// long chunk there would delay the earlier row's first token by that
	// work; it goes in the next pass instead (first come, first served,
	// each first token after as little work as the order allows; short
	// prompts still end together in one pass).
	FillPrefill bool
	// PrefillAlone, when positive, gives a joining row whose prompt ends
	// in the next pass (its first token) that pass alone, without the
	// decoding rows, once at least PrefillAlone rows are decoding; they
	// run in the pass after it (never two such passes in a row). Past a
	// few rows a pass is bound by arithmetic, not by reading the weights,
	// so the decoding rows' next token comes about as soon either way,
	// while the joiner's first token no longer waits for their work.
	// 0 (the default) always runs every decoding row in each pass.
	PrefillAlone int
	// Backend is the backend every row runs on (default: tensor.Default).
	Backend tensor.Backend
	// Pool, when set, holds the KV of every row that brings no caches of
	// its own (Options.Caches): its caches are the pool's, and a row is
	// admitted only once the pool can hold it to the end — admission
	// reserves, per layer, the blocks of its prompt plus MaxTokens
	// (kv.Pool.BlocksNeeded), so a running row never runs out of blocks
	// mid-generation. A request that could never fit (more blocks than a
	// layer holds) is refused by Add with a *FitError; one that fits once
	// others finish waits. KV quantization is then the pool's layer specs'
	// (a row asking for KVBits or KVConfig is refused). The caller owns the
	// pool and frees it after the batch.
	Pool *kv.Pool
	// NoPrefixReuse turns off automatic prefix caching over Pool: by
	// default a row starts from the longest run of whole blocks of its
	// prompt the pool has cached (kv.Pool.AdoptPrefix), and registers its
	// blocks once its prompt is in and again when it ends, for later rows
	// (the pool keeps unreferenced cached blocks until a write needs them:
	// the prompt cache is a view over the pool, under its one capacity).
	NoPrefixReuse bool
	// Restore, when set, may fill a row's fresh pool caches from elsewhere
	// (a cache on disk) at admission, after prefix reuse: it is given the
	// row's Options.CacheNamespace (state it restores must have been
	// computed under that namespace: the same adapters), prompt, the
	// caches and how many tokens they already hold, and returns how many
	// leading prompt tokens they hold after it (at most len(prompt)−1, and
	// no fewer than before: it replaces their state only with a longer
	// one). The row then prefills the rest.
	Restore func(namespace string, prompt []int32, caches []kv.Cache, held int) (int, error)
}

// RowForwarder is a Model whose forward pass can run each row of a batch
// with its own adapter set (LoRA: the base matmuls shared, each row's
// low-rank terms its own). A Batch uses it when some row has
// Options.Adapters; a row's result must equal the model's result for that
// row alone with its set (what the adapted variant computes).
type RowForwarder interface {
	// ForwardRows is Forward over rows laid end to end: rows[i].Tokens of
	// them, with rows[i].Adapters.
	ForwardRows(ids *tensor.Array, caches []kv.Cache, rows []RowSpan) (*tensor.Array, error)
	// LogitsRows is Logits over hidden states laid out as rows says.
	LogitsRows(hidden *tensor.Array, rows []RowSpan) (*tensor.Array, error)
}

// RowSpan is one row's share of a RowForwarder pass.
type RowSpan struct {
	Tokens   int
	Adapters []string
}

// ErrNeverFits is what a *FitError unwraps to.
var ErrNeverFits = errors.New("generate: request can never fit the KV pool")

// FitError refuses a request that needs more KV blocks, in some layer,
// than the batch's pool holds in all: it can never be admitted.
type FitError struct {
	Tokens    int // prompt tokens plus the token cap reserved for
	Layer     int // the first layer that cannot hold them
	Need      int // blocks that layer needs
	Capacity  int // blocks that layer holds in all
	BlockSize int // token slots per block
}

// Error names the numbers.
func (e *FitError) Error() string {
	return fmt.Sprintf("%v: %d tokens need %d blocks of %d slots in layer %d, which holds %d",
		ErrNeverFits, e.Tokens, e.Need, e.BlockSize, e.Layer, e.Capacity)
}

// Unwrap returns ErrNeverFits.
func (e *FitError) Unwrap() error { return ErrNeverFits }

// Batch generates many sequences at once over one model: each Step is
// one forward pass holding every running row's next tokens and chunks of
// the prompts of rows that joined, laid end to end (varlen; no padding),
// each row with its own caches, sampler, random stream, grammar, history
// and limits. Rows join and leave at any step.
//
// A row's tokens and logprobs are computed by the same per-row pieces a
// lone Generate uses (its caches, attention, sampling), so on a backend
// whose kernels give a row the same result whatever else a call holds
// (the CPU backend), a row generates exactly what it generates alone.
//
// A row may decode speculatively (Options.Speculation): its share of a
// pass is then its pending token and its own drafts, verified in the
// same varlen pass (see rowSpec), and it delivers what it delivers alone.
//
// A Batch is driven by one goroutine (Add, Step, Close); Row.Cancel may
// be called from any goroutine.
type Batch struct {
	m       Model
	o       BatchOptions
	be      tensor.Backend
	runner  StepRunner
	mem     MemoryInfo
	waiting []*Row // FIFO
	running []*Row
	nextID  int
	stats   BatchStats
	closed  bool
	// alone: the last pass was a PrefillAlone one
	alone bool
	// over Pool: each layer's capacity and the blocks running rows reserve
	capacity, reserved []int
}

// BatchStats describe a Batch so far.
type BatchStats struct {
	// RowsRunning and RowsWaiting are the rows in the batch now and the
	// rows queued behind them.
	RowsRunning, RowsWaiting int
	// Steps counts forward passes; Tokens the tokens they held;
	// LastStepTokens those of the last one.
	Steps, Tokens, LastStepTokens int
	// GeneratedTokens counts tokens delivered over every row.
	GeneratedTokens int
	// MaxRows is the most rows any step held.
	MaxRows int
	// Over a Pool: Blocks is its accounting now (blocks used, cached and
	// free, per layer and in all); BlocksReserved the blocks admission
	// holds for the running rows, over every layer; PeakBlocks the most
	// blocks in use at once, over every layer (the sum of the layers'
	// peaks); CachedTokens the prompt tokens rows took from the pool's
	// prefix cache instead of computing them.
	Blocks         kv.PoolStats
	BlocksReserved int
	PeakBlocks     int
	CachedTokens   int
}

// Row is one sequence of a Batch.
type Row struct {
	// ID numbers rows in the order they were added, from 0.
	ID     int
	ctx    context.Context
	q      *seq
	caches []kv.Cache
	owned  bool
	plan   kv.QuantPlan
	quant  bool
	mem    MemoryInfo
	phase  rowPhase
	in     []int32 // the next pass's tokens (decode, or the first step)
	prompt []int32
	opts   Options // validated
	need   []int   // blocks reserved per layer while running (over a Pool)
	held   bool    // need is counted in the batch's reservation
	reg    bool    // the prompt's blocks are registered for prefix reuse
	// admitted: the row left the queue
	admitted bool
	cancel   atomic.Bool
	err      error
	freed    bool
	spec     *rowSpec   // speculative decoding's state (batch_spec.go), or nil
	embeds   *RowEmbeds // prompt embeddings (AddEmbeds, batch_media.go), or nil
}

type rowPhase int

const (
	phaseWaiting rowPhase = iota
	phasePrefill
	phaseDecode // in holds the next step's input
	phaseDone
)

// Stats returns the row's statistics (final once its Done event came).
func (r *Row) Stats() Stats { return r.q.stats }

// Err is the error that ended the row, if any.
func (r *Row) Err() error { return r.err }

// Done reports whether the row has ended.
func (r *Row) Done() bool { return r.phase == phaseDone }

// Admitted reports whether the row has left the queue: it runs (or ran)
// in the batch, and Stats().CachedTokens says how much of its prompt it
// took from pre-warmed caches or the pool's prefix cache. A row cancelled
// while queued is Done without being Admitted.
func (r *Row) Admitted() bool { return r.admitted }

// Prefilled reports whether the row's whole prompt is in its caches (its
// first token was computed): from then on, over a Pool with prefix reuse,
// a later row with the same prompt starts from its blocks.
func (r *Row) Prefilled() bool { return r.reg }

// Cancel ends the row at the next Step (its Done event has StopCancelled).
// It is safe from any goroutine.
func (r *Row) Cancel() { r.cancel.Store(true) }

// Event is what one Step did for one row: tokens to deliver, in order,
// and whether the row ended (its Stats are then final).
type Event struct {
	Row    *Row
	Tokens []Token
	Done   bool
	Err    error
}

// NewBatch makes an empty batch over m.
func NewBatch(m Model, o BatchOptions) (*Batch, error) {
	if o.MaxRows == 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.TokenBudget == 0 {
		o.TokenBudget = DefaultPrefillChunkSize
	}
	if o.MaxRows < 0 || o.TokenBudget < 0 || o.PrefillRows < 0 || o.PrefillAlone < 0 {
		return nil, fmt.Errorf("generate: batch of %d rows, %d tokens per pass", o.MaxRows, o.TokenBudget)
	}
	if o.TokenBudget < o.MaxRows {
		return nil, fmt.Errorf("generate: a token budget of %d cannot hold one decode token for each of %d rows", o.TokenBudget, o.MaxRows)
	}
	b := &Batch{m: m, o: o, be: o.Backend}
	if b.be == nil {
		if err := tensor.Try(func() { b.be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	b.runner, _ = b.be.(StepRunner)
	b.mem, _ = b.be.(MemoryInfo)
	if o.Pool != nil {
		specs, err := PoolLayout(m)
		if err != nil {
			return nil, err
		}
		if o.Pool.Layers() != len(specs) {
			return nil, fmt.Errorf("generate: a KV pool of %d layers for a model of %d", o.Pool.Layers(), len(specs))
		}
		for _, l := range o.Pool.Stats().Layers {
			b.capacity = append(b.capacity, l.Capacity)
		}
		b.reserved = make([]int, len(b.capacity))
	}
	return b, nil
}

// PoolLayout is the paged layout of m's caches: kv.LayerSpecs of a fresh
// MakeCaches (freed again), so that a pool made with it stores each layer
// as the model's own contiguous caches would (kind, window, quantization).
func PoolLayout(m Model) ([]kv.LayerSpec, error) {
	var specs []kv.LayerSpec
	var serr error
	if err := tensor.Try(func() {
		cs := m.MakeCaches()
		defer freeCaches(cs)
		specs, serr = kv.LayerSpecs(cs)
	}); err != nil {
		return nil, err
	}
	return specs, serr
}

// Add queues a request: it is validated as Generate validates it (the
// errors are the caller's) and joins the batch at the next Step with
// room. opts.Backend is ignored (the batch's backend runs every row).
func (b *Batch) Add(ctx context.Context, prompt []int32, opts *Options) (*Row, error) {
	if b.closed {
		return nil, errors.New("generate: batch closed")
	}
	p, err := prepare(b.m, prompt, opts, b.be)
	if err != nil {
		return nil, err
	}
	if _, ok := b.m.(RowForwarder); len(p.o.Adapters) > 0 && !ok {
		p.smp.Free()
		return nil, fmt.Errorf("generate: adapters %v asked of a model that runs none (no RowForwarder)", p.o.Adapters)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	r := &Row{ID: b.nextID, ctx: ctx, plan: p.plan, quant: p.quant, mem: p.mem, prompt: slices.Clone(prompt), opts: p.o}
	if b.o.Pool != nil && p.o.Caches == nil {
		if err := b.reservation(r); err != nil {
			p.smp.Free()
			return nil, err
		}
	}
	b.nextID++
	r.q = newSeq(prompt, p.o, b.m.VocabSize(), p.smp, p.cached)
	r.caches = p.o.Caches
	b.waiting = append(b.waiting, r)
	return r, nil
}

// reservation works out the blocks a row over the pool holds at most
// (r.need), refusing one that can never fit.
func (b *Batch) reservation(r *Row) error {
	o := &r.opts
	if r.quant {
		return errors.New("generate: a row over a KV pool cannot ask for KV quantization (KVBits, KVConfig): the pool's layer specs decide how its blocks store KV")
	}
	if o.MaxTokens < 0 {
		return errors.New("generate: a row over a KV pool needs a token cap (MaxTokens >= 0): admission reserves its blocks to the end")
	}
	tokens := len(r.prompt) + o.MaxTokens
	// The largest write: a prefill chunk or a decode pass within the
	// budget, or, with jump-forward, forced runs of any length.
	chunk := max(min(b.o.TokenBudget, o.PrefillChunkSize), 1)
	if o.Grammar != nil && o.JumpForward {
		chunk = tokens
	}
	chunk = max(chunk, specChunk(o))
	r.need = b.o.Pool.BlocksNeeded(tokens, chunk)
	for l, n := range r.need {
		if n > b.capacity[l] {
			return &FitError{Tokens: tokens, Layer: l, Need: n, Capacity: b.capacity[l], BlockSize: b.o.Pool.BlockSize()}
		}
	}
	return nil
}

// fits reports whether the pool has room for r beside the running rows'
// reservations.
func (b *Batch) fits(r *Row) bool {
	for l, n := range r.need {
		if b.reserved[l]+n > b.capacity[l] {
			return false
		}
	}
	return true
}

// hold adds (sign 1) or removes (−1) r's reservation.
func (b *Batch) hold(r *Row, sign int) {
	for l, n := range r.need {
		b.reserved[l] += sign * n
	}
	r.held = sign > 0
}

// Idle reports whether no row is running or waiting.
func (b *Batch) Idle() bool { return len(b.running) == 0 && len(b.waiting) == 0 }

// Stats returns the batch's statistics so far.
func (b *Batch) Stats() BatchStats {
	st := b.stats
	st.RowsRunning, st.RowsWaiting = len(b.running), len(b.waiting)
	if b.o.Pool != nil {
		st.Blocks = b.o.Pool.Stats()
		st.PeakBlocks = st.Blocks.Peak
		for _, n := range b.reserved {
			st.BlocksReserved += n
		}
	}
	return st
}

// segment is one row's share of a pass.
type segment struct {
	r      *Row
	ids    []int32
	logits bool // the pass's last position of ids is sampled (else: prefill)
	// pre is how many leading ids are the end of the row's prompt riding
	// with its first step (already recorded as prefilled)
	pre int
	// outs is how many last positions of ids are sampled when logits is
	// set (a speculative round's pending token and drafts); 0 means 1
	outs int
}

// nout is how many positions of the segment's ids have their logits taken.
func (s segment) nout() int {
	switch {
	case !s.logits:
		return 0
	case s.outs > 0:
		return s.outs
	}
	return 1
}

// Step runs one forward pass over the running rows (admitting waiting
// ones first, ending cancelled ones) and returns what happened to each
// row that did something. An error is returned only when the pass itself
// failed: every row in it then ends with that error (their events say
// so); a row's own failure (its grammar, say) ends that row alone.
func (b *Batch) Step() (events []Event, err error) {
	if b.closed {
		return nil, errors.New("generate: batch closed")
	}
	events = b.reap(events)
	for len(b.running) < b.o.MaxRows && len(b.waiting) > 0 {
		r := b.waiting[0]
		if r.need != nil && !b.fits(r) {
			break // first come, first served: the head waits for blocks
		}
		b.waiting = b.waiting[1:]
		events = b.admit(r, events)
	}
	segs, events := b.plan(events)
	if len(segs) == 0 {
		b.compact()
		return events, nil
	}
	ev, err := b.pass(segs)
	events = append(events, ev...)
	b.compact()
	return events, err
}

// reap ends rows whose context was cancelled or that were cancelled.
func (b *Batch) reap(events []Event) []Event {
	for _, list := range [][]*Row{b.running, b.waiting} {
		for _, r := range list {
			if r.phase != phaseDone && (r.cancel.Load() || r.ctx.Err() != nil) {
				events = b.end(r, StopCancelled, r.ctx.Err(), events)
			}
		}
	}
	b.waiting = slices.DeleteFunc(b.waiting, func(r *Row) bool { return r.phase == phaseDone })
	return events
}

// admit starts a row: its caches, then prefill (or the first step at
// once, for a prompt of one token beyond what its caches hold).
func (b *Batch) admit(r *Row, events []Event) []Event {
	if r.caches == nil && r.need != nil {
		b.hold(r, 1)
		r.caches = b.o.Pool.NewCaches()
		r.owned = true
		n := 0
		if !b.o.NoPrefixReuse {
			var err error
			if n, err = b.o.Pool.AdoptPrefixIn(r.opts.CacheNamespace, r.caches, r.prompt, len(r.prompt)-1); err != nil {
				return b.end(r, StopError, err, events)
			}
		}
		if b.o.Restore != nil && n < len(r.prompt)-1 {
			m, err := b.o.Restore(r.opts.CacheNamespace, r.prompt, r.caches, n)
			if err != nil {
				return b.end(r, StopError, err, events)
			}
			if m < n || m >= len(r.prompt) {
				return b.end(r, StopError, fmt.Errorf("generate: restore left %d of a %d-token prompt in caches holding %d", m, len(r.prompt), n), events)
			}
			n = m
		}
		if n > 0 {
			r.q = newSeq(r.prompt, r.opts, b.m.VocabSize(), r.q.smp, n)
			b.stats.CachedTokens += n
		}
	}
	if r.caches == nil {
		if err := tensor.Try(func() { r.caches = b.m.MakeCaches() }); err != nil {
			return b.end(r, StopError, err, events)
		}
		r.owned = true
	}
	if err := b.specStart(r); err != nil {
		return b.end(r, StopError, err, events)
	}
	r.q.start = time.Now()
	r.phase = phasePrefill
	r.admitted = true
	r.q.snapshot(r.caches)
	b.running = append(b.running, r)
	return events
}

// plan picks the pass's segments: every decoding row's next tokens, then
// prefill chunks (or first steps) of the others, in row order, within the
// token budget (and BatchOptions.PrefillRows, FillPrefill).
func (b *Batch) plan(events []Event) ([]segment, []Event) {
	var segs []segment
	budget := b.o.TokenBudget
	// A sampled row's grammar mask is host work: filled here, before the
	// pass and outside Run.
	sampled := func(r *Row, pre, ids []int32) bool {
		if err := r.q.fillMask(); err != nil {
			events = b.end(r, StopError, err, events)
			return false
		}
		segs = append(segs, segment{r: r, ids: append(slices.Clip(pre), ids...), logits: true, pre: len(pre)})
		budget -= len(pre) + len(ids)
		return true
	}
	// A speculative row drafts into what the budget leaves after every
	// decoding row's pending tokens.
	specced := func(r *Row, pre []int32, avail int) {
		seg, err := b.specSegment(r, pre, avail)
		if err != nil {
			events = b.end(r, StopError, err, events)
			return
		}
		segs = append(segs, seg)
		budget -= len(seg.ids)
	}
	pendingIn := 0
	for _, r := range b.running {
		if r.phase == phaseDecode {
			pendingIn += len(r.in)
		}
	}
	b.alone = b.prefillAlone()
	for _, r := range b.running {
		if r.phase == phaseDecode && !b.alone {
			pendingIn -= len(r.in)
			if r.spec != nil {
				specced(r, nil, budget-pendingIn)
				continue
			}
			sampled(r, nil, r.in)
		}
	}
	joining := 0    // rows with a prompt chunk in this pass
	firsts := false // some row's first step is in this pass
	for _, r := range b.running {
		if r.phase != phasePrefill || budget <= 0 {
			continue
		}
		var pre []int32
		if ids := r.q.nextChunk(min(budget, r.q.o.PrefillChunkSize)); ids != nil {
			if b.o.PrefillRows > 0 && joining >= b.o.PrefillRows {
				continue
			}
			ends := r.q.endsPrefill(ids) && len(ids)+1 <= budget
			if !ends && firsts && !b.o.FillPrefill {
				continue // not beside an earlier row's first token
			}
			joining++
			if !ends {
				segs = append(segs, segment{r: r, ids: ids})
				budget -= len(ids)
				continue
			}
			// The chunk ends the prefill and the first step (the last
			// prompt token: no grammar forces more) fits beside it: both
			// go in this pass, one step sooner to the first token. The
			// logits of the last position are those of the step alone
			// (the kernels do not depend on the tokens beside it).
			r.q.prefilled(ids, r.caches)
			pre = ids
		}
		if r.spec != nil {
			r.specEnter()
			if len(pre)+len(r.in) <= budget || len(segs) == 0 || pre != nil {
				specced(r, pre, budget)
				firsts = true
			}
			continue
		}
		in, lead, stop, err := r.q.firstStep()
		if err != nil {
			events = b.end(r, StopError, err, events)
			continue
		}
		if len(lead) > 0 || stop != "" {
			events = append(events, b.deliver(r, lead))
		}
		if stop != "" {
			events = b.end(r, stop, nil, events)
			continue
		}
		r.phase, r.in = phaseDecode, in
		// The first step and its forced tokens go in one pass (as alone):
		// without room in this one, the row waits for the next.
		if len(pre)+len(in) <= budget || len(segs) == 0 || pre != nil {
			if sampled(r, pre, in) {
				firsts = true
			}
		}
	}
	return segs, events
}

// prefillAlone reports whether the next pass runs joining rows only (see
// BatchOptions.PrefillAlone): enough rows decode, the pass before ran
// them, and the first joiner's next chunk ends its prompt.
func (b *Batch) prefillAlone() bool {
	if b.o.PrefillAlone <= 0 || b.alone {
		return false
	}
	decoding := 0
	var first *Row
	for _, r := range b.running {
		switch {
		case r.phase == phaseDecode:
			decoding++
		case r.phase == phasePrefill && first == nil:
			first = r
		}
	}
	if decoding < b.o.PrefillAlone || first == nil || first.spec != nil {
		return false
	}
	ids := first.q.nextChunk(min(b.o.TokenBudget, first.q.o.PrefillChunkSize))
	return ids == nil || first.q.endsPrefill(ids) && len(ids)+1 <= b.o.TokenBudget
}

// pass runs segs through the model as one forward pass and samples the
// rows that asked for logits.
func (b *Batch) pass(segs []segment) (events []Event, err error) {
	var ids []int32
	lens := make([]int, len(segs))
	for i, s := range segs {
		ids = append(ids, s.ids...)
		lens[i] = len(s.ids)
	}
	b.stats.Steps++
	b.stats.Tokens += len(ids)
	b.stats.LastStepTokens = len(ids)
	b.stats.MaxRows = max(b.stats.MaxRows, len(segs))
	fail := func(err error) ([]Event, error) {
		for _, s := range segs {
			if s.r.phase != phaseDone {
				events = b.end(s.r, StopError, err, events)
			}
		}
		return events, err
	}
	err = b.onBackend(func() error {
		sc := tensor.NewScope()
		defer sc.Close()
		caches := b.layerCaches(segs, lens)
		rf, spans, logitSpans := b.rowSpans(segs)
		in := tensor.FromInt32On(b.be, ids, []int{1, len(ids)})
		var last []int32 // the positions whose logits are sampled
		start := 0
		for _, s := range segs {
			start += len(s.ids)
			for j := s.nout(); j > 0; j-- {
				last = append(last, int32(start-j))
			}
		}
		// without a drafter that reads the target's state, only the sampled
		// positions' hidden states are needed (one for a pass of prefill
		// alone: its output is not used)
		var outputs []int32
		if !slices.ContainsFunc(segs, func(s segment) bool { return s.r.spec != nil && s.r.spec.obs != nil }) {
			outputs = last
			if len(outputs) == 0 {
				outputs = []int32{int32(len(ids) - 1)}
			}
		}
		h, err := b.forwardPass(in, ids, caches, segs, rf, spans, outputs)
		if err != nil {
			return err
		}
		if err := b.specHidden(segs, h); err != nil { // drafters that read the target's state
			return err
		}
		var logits *tensor.Array
		if len(last) > 0 {
			hs := h
			if len(last) != h.Dim(1) {
				hs = tensor.Take(h, tensor.FromInt32On(b.be, last, []int{len(last)}), 1)
			}
			if rf != nil {
				logits, err = rf.LogitsRows(hs, logitSpans)
			} else {
				logits, err = b.m.Logits(hs)
			}
			if err != nil {
				return err
			}
			logits = tensor.Reshape(logits, len(last), logits.Dim(-1))
		} else {
			tensor.Eval(h)
		}
		for _, s := range segs {
			if s.r.quant && s.r.spec == nil { // a speculative row quantizes after its rollback
				if _, err := kv.MaybeQuantize(s.r.caches, s.r.plan); err != nil {
					return err
				}
			}
		}
		row := 0
		for _, s := range segs {
			if !s.logits {
				continue
			}
			if s.r.spec != nil {
				s.r.specKeep(sc, logits, row, s.nout())
				row += s.nout()
				continue
			}
			s.r.q.stats.DecodeSteps++
			p, err := s.r.q.sample(tensor.SliceAxis(logits, 0, row, row+1))
			row++
			if err != nil {
				events = b.end(s.r, StopError, err, events)
				continue
			}
			s.r.q.cur = p
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	for _, s := range segs {
		r, q := s.r, s.r.q
		if r.phase == phaseDone {
			continue
		}
		if !s.logits {
			q.prefilled(s.ids, r.caches)
			continue
		}
		if r.spec != nil {
			events = b.specResult(s, now, events)
			continue
		}
		var res = q.read()
		q.noteRead(now)
		q.fed(s.ids[s.pre:]...)
		q.snapshot(r.caches)
		if !r.reg {
			r.reg = true // the prompt is in: later rows may share its blocks
			if err := b.register(r); err != nil {
				events = b.end(r, StopError, err, events)
				continue
			}
		}
		toks, stop, err := q.accept(res)
		if err != nil {
			events = b.end(r, StopError, err, events)
			continue
		}
		if stop == "" {
			events = append(events, b.deliver(r, toks))
			stop = q.done()
		}
		if stop != "" {
			events = b.end(r, stop, nil, events)
			continue
		}
		r.in = q.next
	}
	if b.stats.Steps%256 == 0 && b.mem != nil {
		_ = b.mem.ClearCache()
	}
	return events, nil
}

// rowSpans is the pass's per-row adapter layout when some row runs with
// adapters on a RowForwarder model (else rf is nil): the tokens of each
// segment, and one position per sampled row for the logits.
func (b *Batch) rowSpans(segs []segment) (rf RowForwarder, spans, logits []RowSpan) {
	rf, ok := b.m.(RowForwarder)
	if !ok || !slices.ContainsFunc(segs, func(s segment) bool { return len(s.r.opts.Adapters) > 0 }) {
		return nil, nil, nil
	}
	for _, s := range segs {
		spans = append(spans, RowSpan{Tokens: len(s.ids), Adapters: s.r.opts.Adapters})
		if s.logits {
			logits = append(logits, RowSpan{Tokens: s.nout(), Adapters: s.r.opts.Adapters})
		}
	}
	return rf, spans, logits
}

// layerCaches makes each layer's cache for the pass: the lone row's own
// caches, or a kv.Rows view over the rows' caches of that layer.
func (b *Batch) layerCaches(segs []segment, lens []int) []kv.Cache {
	if len(segs) == 1 {
		return segs[0].r.caches
	}
	n := len(segs[0].r.caches)
	out := make([]kv.Cache, n)
	row := make([]kv.Cache, len(segs))
	for l := range n {
		if segs[0].r.caches[l] == nil {
			continue
		}
		for i, s := range segs {
			row[i] = s.r.caches[l]
		}
		out[l] = kv.NewRows(row, lens)
	}
	return out
}

// deliver makes a row's event for toks, counting them.
func (b *Batch) deliver(r *Row, toks []Token) Event {
	r.q.stats.GeneratedTokens += len(toks)
	b.stats.GeneratedTokens += len(toks)
	return Event{Row: r, Tokens: toks}
}

// end finishes a row with reason (and err), frees what it owns and adds
// its Done event.
func (b *Batch) end(r *Row, reason string, err error, events []Event) []Event {
	if r.phase == phaseDone {
		return events
	}
	r.phase = phaseDone
	r.err = err
	r.q.finish(reason)
	if r.mem != nil {
		if p, e := r.mem.PeakMemory(); e == nil {
			r.q.stats.PeakMemory = p
		}
	}
	if reason != StopError {
		// what the row computed stays cached for later rows (a failed pass
		// may have left its caches half written: not those)
		_ = b.register(r)
	}
	if r.held {
		b.hold(r, -1)
	}
	r.release()
	return append(events, Event{Row: r, Done: true, Err: err})
}

// register adds the whole blocks of what r's pool caches hold to the
// pool's prefix index (automatic prefix caching), when that is on.
func (b *Batch) register(r *Row) error {
	if r.need == nil || !r.owned || r.caches == nil || b.o.NoPrefixReuse {
		return nil
	}
	_, err := b.o.Pool.RegisterPrefixIn(r.opts.CacheNamespace, r.caches, r.q.cacheToks)
	return err
}

// release frees the row's steps in flight, sampler and owned caches.
func (r *Row) release() {
	if r.freed {
		return
	}
	r.freed = true
	r.specClose()
	r.q.freeSteps()
	r.q.smp.Free()
	if r.owned {
		for _, c := range r.caches {
			if c != nil {
				c.Free()
			}
		}
	}
	r.caches = nil
}

// compact drops ended rows from the running list.
func (b *Batch) compact() {
	b.running = slices.DeleteFunc(b.running, func(r *Row) bool { return r.phase == phaseDone })
}

// onBackend runs f inside the backend's Run when it is a StepRunner.
func (b *Batch) onBackend(f func() error) error { return onRunner(b.runner, f) }

// Close ends every row still running or waiting (StopCancelled) and
// frees what they own.
func (b *Batch) Close() {
	if b.closed {
		return
	}
	for _, r := range append(b.running, b.waiting...) {
		if r.phase != phaseDone {
			r.q.finish(StopCancelled)
			r.phase = phaseDone
		}
		r.release()
	}
	b.running, b.waiting = nil, nil
	b.closed = true
}
