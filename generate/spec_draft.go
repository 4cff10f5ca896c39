package generate

import (
	"fmt"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// ModelDrafter drafts with a second, smaller model of the same vocabulary
// (mlx-lm's draft model). It keeps its own caches in step with the
// sequence: each Draft first drops what the target rejected (the tokens
// its caches hold past the longest prefix they share with the sequence),
// feeds what it has not seen, then decodes the drafts one by one. Caches
// that cannot trim are handled as the target's are (a snapshot before the
// round's writes, restored and replayed after a rejection).
//
// With exact-match acceptance it drafts the most likely token (after the
// request's logits processors, without the grammar's mask); for
// speculative sampling it draws each draft from its own distribution
// under the request's sampling parameters and reports that distribution.
type ModelDrafter struct {
	m      Model
	be     tensor.Backend
	runner StepRunner
	caches []kv.Cache
	held   []int32 // the tokens whose KV the caches hold
	snap   cacheSnap
	snapAt int // len(held) when snap was taken
	greedy *sampler.Sampler
	dist   *sampler.Sampler
	window int
	chunk  int
	calls  int
	// stepSec is the time of the last Draft's one-token draft steps, per
	// step (what a draft token costs, catching up excluded).
	stepSec float64
}

// NewModelDrafter makes a drafter over draft model m for a generation
// described by info; m's vocabulary must be the target's.
func NewModelDrafter(m Model, info DraftInfo) (*ModelDrafter, error) {
	if m.VocabSize() != info.Vocab {
		return nil, fmt.Errorf("generate: the draft model's vocabulary (%d tokens) differs from the target's (%d tokens)", m.VocabSize(), info.Vocab)
	}
	be := info.Backend
	if be == nil {
		if err := tensor.Try(func() { be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	p := info.Sampler
	p.Logprobs, p.TopLogprobs = false, 0
	seed := uint64(0x5eed)
	if p.Seed != nil {
		seed ^= *p.Seed
	}
	p.Seed = &seed
	g := p
	g.Temperature = 0
	greedy, err := sampler.NewOn(be, g, info.Vocab)
	if err != nil {
		return nil, err
	}
	d := &ModelDrafter{m: m, be: be, greedy: greedy, window: greedy.HistoryWindow(), chunk: info.PrefillChunkSize}
	if d.chunk <= 0 {
		d.chunk = DefaultPrefillChunkSize
	}
	if p.Temperature > 0 {
		if d.dist, err = sampler.NewOn(be, p, info.Vocab); err != nil {
			greedy.Free()
			return nil, err
		}
	}
	d.runner, _ = be.(StepRunner)
	d.caches = m.MakeCaches()
	return d, nil
}

// forwards is the number of draft forward passes so far (SpecStats.DraftCalls).
func (d *ModelDrafter) forwards() int { return d.calls }

// Close frees the drafter's caches and samplers.
func (d *ModelDrafter) Close() {
	d.snap.free()
	for _, c := range d.caches {
		if c != nil {
			c.Free()
		}
	}
	d.caches = nil
	d.greedy.Free()
	if d.dist != nil {
		d.dist.Free()
	}
}

// reset empties the caches (when a rollback is impossible).
func (d *ModelDrafter) reset() {
	d.snap.free()
	for _, c := range d.caches {
		if c != nil {
			c.Free()
		}
	}
	d.caches = d.m.MakeCaches()
	d.held = d.held[:0]
}

// sync rolls the caches back to the longest prefix they share with
// tokens[:len(tokens)-1] (at least the last token is always fed again).
func (d *ModelDrafter) sync(tokens []int32) error {
	p := 0
	for p < len(d.held) && p < len(tokens)-1 && d.held[p] == tokens[p] {
		p++
	}
	drop := len(d.held) - p
	written := len(d.held) - d.snapAt
	if drop > written && d.snap.any {
		d.reset()
		return nil
	}
	replay, err := d.snap.rewind(d.caches, written, drop)
	if err != nil {
		d.reset()
		return nil
	}
	if replay >= 0 {
		d.held = d.held[:d.snapAt]
	} else {
		d.held = d.held[:p]
	}
	return nil
}

// Draft proposes n tokens to follow tokens (see ModelDrafter).
func (d *ModelDrafter) Draft(tokens []int32, n int, r *SpecRand) (Draft, error) {
	if len(tokens) == 0 || n <= 0 {
		return Draft{}, nil
	}
	if err := d.sync(tokens); err != nil {
		return Draft{}, err
	}
	feed := slices.Clone(tokens[len(d.held):])
	d.snapAt = len(d.held)
	d.snap.take(d.caches, len(feed)+n-1)
	// the part of feed before its last token: KV only, in chunks
	for len(feed) > 1 {
		c := feed[:min(d.chunk, len(feed)-1)]
		if err := onRunner(d.runner, func() error { return d.prefill(c) }); err != nil {
			return Draft{}, err
		}
		d.held = append(d.held, c...)
		feed = feed[len(c):]
	}
	var out Draft
	hist := recent(tokens, d.window)
	t0 := time.Now()
	for i := range n {
		var tok int32
		var probs []float32
		err := onRunner(d.runner, func() (err error) {
			tok, probs, err = d.step(feed, hist, r)
			return err
		})
		if err != nil {
			return Draft{}, err
		}
		d.held = append(d.held, feed...)
		out.Tokens = append(out.Tokens, tok)
		if probs != nil {
			out.Probs = append(out.Probs, probs)
		}
		if d.window > 0 {
			hist = recent(append(slices.Clone(hist), tok), d.window)
		}
		if i < n-1 {
			feed = []int32{tok}
		}
	}
	d.stepSec = time.Since(t0).Seconds() / float64(n)
	return out, nil
}

// stepCost is the time a draft token cost in the last Draft, the
// catching-up prefill excluded (what the adaptive γ weighs).
func (d *ModelDrafter) stepCost() float64 { return d.stepSec }

// prefill writes ids' KV into the caches.
func (d *ModelDrafter) prefill(ids []int32) error {
	sc := tensor.NewScope()
	defer sc.Close()
	d.calls++
	h, err := d.m.Forward(tensor.FromInt32On(d.be, ids, []int{1, len(ids)}), d.caches)
	if err != nil {
		return err
	}
	tensor.Eval(h)
	return nil
}

// step feeds ids and picks the next token from the last position's
// logits: the most likely one when r is nil, else a draw with its
// distribution.
func (d *ModelDrafter) step(ids, hist []int32, r *SpecRand) (int32, []float32, error) {
	sc := tensor.NewScope()
	defer sc.Close()
	d.calls++
	h, err := d.m.Forward(tensor.FromInt32On(d.be, ids, []int{1, len(ids)}), d.caches)
	if err != nil {
		return 0, nil, err
	}
	if t := h.Dim(1); t > 1 {
		h = tensor.SliceAxis(h, 1, t-1, t)
	}
	l, err := d.m.Logits(h)
	if err != nil {
		return 0, nil, err
	}
	row := tensor.Reshape(l, 1, l.Dim(-1))
	if r == nil || d.dist == nil {
		st, err := d.greedy.Step(row, hist, nil)
		if err != nil {
			return 0, nil, err
		}
		return int32(st.Results()[0].Token), nil, nil
	}
	lp, pr, err := d.dist.Distribution(row, hist, nil)
	if err != nil {
		return 0, nil, err
	}
	lp.Free()
	probs := pr.Float32s()
	pr.Free()
	v, err := r.Float64()
	if err != nil {
		return 0, nil, err
	}
	return int32(drawFrom(probs, v)), probs, nil
}
