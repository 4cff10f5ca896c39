package generate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// rowSpec is a batch row's speculative decoding state (Options.Speculation
// on a Batch row): what a lone Stream's runSpec keeps, per row. Each pass
// the row's segment is [pending…, drafts…] (its own γ, up to what the
// pass's token budget leaves), the pass returns the logits of its last
// len(drafts)+1 positions, and the row's accept walk, rollback (trim, or
// snapshot restore and replay) and statistics are those of runSpec, so a
// row decodes in a batch what it decodes alone with the same Speculation
// (and, greedy, what it decodes without one).
type rowSpec struct {
	run     *specRun
	ctxToks []int32 // the prompt and every emitted token
	dr      Draft   // the drafts of the pass being planned or run
	rows    *tensor.Array
	// hidden holds the round's final hidden states over the segment
	// ([1, len(ids), D]) when the drafter is a TargetObserver
	hidden  *tensor.Array
	obs     TargetObserver  // the drafter, when it reads the target's state
	pobs    PrefillObserver // the drafter, when it reads the prompt's too
	t0, t1  time.Time       // the round's drafting started, ended
	windows []int           // per layer: a paged layer's sliding window (0: none)
	done    bool            // the statistics are final and the drafter closed
}

// specChunk is the largest write one speculative round of o makes (the
// tokens replayed after a restore, the pending one and γ drafts), which
// a row's block reservation must allow for; 0 without speculation.
func specChunk(o *Options) int {
	if !specOn(o) {
		return 0
	}
	return 2*numDraft(o.Speculation) + 1
}

// specStart gives an admitted row its drafter and speculative state, when
// it asks for speculation.
func (b *Batch) specStart(r *Row) error {
	if !specOn(&r.opts) {
		return nil
	}
	info := DraftInfo{Vocab: b.m.VocabSize(), Sampler: r.opts.Sampler, Backend: b.be, PrefillChunkSize: r.opts.PrefillChunkSize}
	d, err := makeDrafter(r.opts.Speculation, info)
	if err != nil {
		return fmt.Errorf("generate: draft source: %w", err)
	}
	if d == nil {
		return errors.New("generate: the draft source factory returned no drafter")
	}
	sp := &rowSpec{run: newSpecRun(r.q, d), ctxToks: slices.Clone(r.prompt)}
	sp.obs, _ = d.(TargetObserver)
	sp.pobs, _ = d.(PrefillObserver)
	if r.need != nil { // pool caches: their windows are the model's layout's
		specs, err := PoolLayout(b.m)
		if err != nil {
			d.Close()
			return err
		}
		sp.windows = make([]int, len(specs))
		for i, s := range specs {
			sp.windows[i] = s.Window
		}
	}
	r.spec = sp
	return nil
}

// specEnter moves a row whose prompt (all but its last token) is in its
// caches to decoding: the first round's pending token is the prompt's
// last (speculation excludes jump-forward, so nothing is forced first).
func (r *Row) specEnter() {
	r.phase, r.in = phaseDecode, slices.Clone(r.q.prompt[len(r.q.prompt)-1:])
}

// specSegment drafts the row's next round and returns its segment: pre
// (the end of its prompt riding along, already recorded as prefilled),
// the pending tokens and up to γ drafts, within avail tokens in all.
func (b *Batch) specSegment(r *Row, pre []int32, avail int) (segment, error) {
	q, sp := r.q, r.spec
	run := sp.run
	k := run.gamma
	if run.auto != nil {
		k = run.auto.pick(len(r.in))
	}
	if room := q.room(q.n); room >= 0 {
		k = min(k, room-1)
	}
	k = min(k, avail-len(pre)-len(r.in))
	if !q.fired { // a snapshot is due once the prompt alone is in the caches
		k = 0
	}
	sp.dr = Draft{}
	sp.t0 = time.Now()
	if k > 0 {
		var rnd *SpecRand
		if run.sampling {
			rnd = run.rnd
		}
		dr, err := run.drafter.Draft(sp.ctxToks, k, rnd)
		if err != nil {
			return segment{}, fmt.Errorf("generate: draft: %w", err)
		}
		if len(dr.Tokens) > k {
			dr.Tokens = dr.Tokens[:k]
		}
		for _, t := range dr.Tokens {
			if t < 0 || int(t) >= q.vocab {
				return segment{}, fmt.Errorf("generate: drafted token %d outside the vocabulary [0, %d)", t, q.vocab)
			}
		}
		sp.dr = dr
	}
	sp.t1 = time.Now()
	// The pass writes pre too: a restore goes back to before it, and the
	// replay feeds it again.
	written := len(pre) + len(r.in) + len(sp.dr.Tokens)
	if len(sp.dr.Tokens) > 0 { // without drafts nothing is rolled back
		run.snap.takeWindows(r.caches, written, sp.windows)
	}
	ids := append(append(slices.Clip(pre), r.in...), sp.dr.Tokens...)
	return segment{r: r, ids: ids, logits: true, pre: len(pre), outs: len(sp.dr.Tokens) + 1}, nil
}

// takeWindows is take for caches some of which are paged sliding-window
// layers (windows[l] > 0), which cannot trim once n more tokens reach
// their window.
func (cs *cacheSnap) takeWindows(caches []kv.Cache, n int, windows []int) {
	if windows == nil {
		cs.take(caches, n)
		return
	}
	cs.free()
	for i, c := range caches {
		if c == nil {
			continue
		}
		w := 0
		if i < len(windows) {
			w = windows[i]
		}
		if !untrimmableAfter(c, n) && (w == 0 || c.Offset()+n < w) {
			continue
		}
		if cs.states == nil {
			cs.states = make([]kv.State, len(caches))
			cs.taken = make([]bool, len(caches))
		}
		cs.states[i] = c.State()
		cs.taken[i] = true
		cs.any = true
	}
}

// specHidden hands the pass's final hidden states h ([1, tokens, D]) to
// the drafters that read them: a prefill chunk's to a PrefillObserver at
// once, a round's segment kept for its TargetObserver (specResult). It
// runs inside the pass's StepRunner.
func (b *Batch) specHidden(segs []segment, h *tensor.Array) error {
	start := 0
	for _, s := range segs {
		at := start
		start += len(s.ids)
		sp := s.r.spec
		if sp == nil || sp.obs == nil {
			continue
		}
		if !s.logits {
			if sp.pobs != nil {
				if err := sp.pobs.ObservePrefill(tensor.SliceAxis(h, 1, at, at+len(s.ids)), len(s.r.q.cacheToks)); err != nil {
					return fmt.Errorf("generate: draft source: %w", err)
				}
			}
			continue
		}
		hs := tensor.SliceAxis(h, 1, at, at+len(s.ids))
		tensor.Eval(hs)
		tensor.Detach(hs)
		tensor.Free(sp.hidden)
		sp.hidden = hs
	}
	return nil
}

// specObserve gives a TargetObserver drafter the round's hidden states
// once the row's caches are rolled back: a prompt end riding along (pre)
// as prefill, then the round's own positions.
func (b *Batch) specObserve(s segment, drop int, restored bool) error {
	sp := s.r.spec
	h := sp.hidden
	sp.hidden = nil
	if sp.obs == nil || h == nil {
		tensor.Free(h)
		return nil
	}
	defer h.Free()
	return b.onBackend(func() error {
		sc := tensor.NewScope()
		defer sc.Close()
		n := len(s.ids)
		if s.pre > 0 && sp.pobs != nil {
			at := len(s.r.q.cacheToks) - n // the segment's first position (cacheToks still ends with the whole segment)
			if restored {
				at = -1
			}
			if at >= 0 {
				if err := sp.pobs.ObservePrefill(tensor.SliceAxis(h, 1, 0, s.pre), at); err != nil {
					return err
				}
			}
		}
		return sp.obs.Observe(tensor.SliceAxis(h, 1, s.pre, n), n-s.pre-1-drop, s.r.caches, restored)
	})
}

// specKeep keeps the row's verified positions' logits (n rows of logits
// from row first on, lazy) past the pass's scope, evaluated.
func (r *Row) specKeep(sc *tensor.Scope, logits *tensor.Array, first, n int) {
	rows := tensor.SliceAxis(logits, 0, first, first+n)
	tensor.Eval(rows)
	sc.Keep(rows)
	tensor.Detach(rows)
	r.spec.rows = rows
}

// specResult finishes a speculative row's round once the pass is done:
// the accept walk over its verified positions, the rollback of what was
// rejected, the statistics, delivery, and the next round's pending
// tokens.
func (b *Batch) specResult(s segment, now time.Time, events []Event) []Event {
	r, q, sp := s.r, s.r.q, s.r.spec
	run := sp.run
	rows := sp.rows
	sp.rows = nil
	if rows == nil {
		return b.end(r, StopError, errors.New("generate: internal error: a speculative row's logits are missing"), events)
	}
	defer rows.Free()
	q.noteRead(now)
	feed := s.ids[s.pre:]
	q.fed(feed...)
	q.stats.DecodeSteps++
	run.st.TargetCalls++
	drafts := sp.dr.Tokens
	toks, accepted, stop, err := q.acceptWalk(b.runner, run, rows, sp.dr)
	if err != nil {
		return b.end(r, StopError, err, events)
	}
	if run.st.TargetCalls == 1 {
		run.firstToks = len(toks)
	}
	if run.auto != nil {
		draftSec := sp.t1.Sub(sp.t0).Seconds()
		if c, ok := run.drafter.(interface{ stepCost() float64 }); ok {
			draftSec = c.stepCost() * float64(len(drafts))
		}
		run.auto.observe(len(drafts), accepted, len(feed), now.Sub(sp.t1).Seconds(), draftSec)
	}
	run.st.record(len(drafts), accepted)
	drop := len(drafts) - accepted
	var replay int
	err = b.onBackend(func() (err error) {
		replay, err = run.snap.rewind(r.caches, len(s.ids), drop)
		return err
	})
	if err != nil {
		return b.end(r, StopError, err, events)
	}
	if replay >= 0 {
		run.st.Restores++
	}
	if err := b.specObserve(s, drop, replay >= 0); err != nil {
		return b.end(r, StopError, fmt.Errorf("generate: draft source: %w", err), events)
	}
	q.cacheToks = q.cacheToks[:len(q.cacheToks)-drop]
	var in []int32
	if replay >= 0 { // restored: the kept tokens are fed again
		in = slices.Clone(q.cacheToks[len(q.cacheToks)-replay:])
		q.cacheToks = q.cacheToks[:len(q.cacheToks)-replay]
	}
	if r.quant {
		err := b.onBackend(func() error {
			_, err := kv.MaybeQuantize(r.caches, r.plan)
			return err
		})
		if err != nil {
			return b.end(r, StopError, err, events)
		}
	}
	q.snapshot(r.caches)
	if !r.reg {
		r.reg = true // the prompt is in: later rows may share its blocks
		if err := b.register(r); err != nil {
			return b.end(r, StopError, err, events)
		}
	}
	for _, t := range toks {
		sp.ctxToks = append(sp.ctxToks, t.ID)
	}
	if len(toks) > 0 {
		events = append(events, b.deliver(r, toks))
	}
	if stop == "" {
		stop = q.done()
	}
	if stop != "" {
		return b.end(r, stop, nil, events)
	}
	if len(toks) == 0 {
		return b.end(r, StopError, errors.New("generate: internal error: a speculative round emitted nothing"), events)
	}
	r.in = append(in, toks[len(toks)-1].ID)
	return events
}

// specClose makes the row's speculative statistics final and frees its
// drafter and snapshots (once; nothing without speculation).
func (r *Row) specClose() {
	sp := r.spec
	if sp == nil || sp.done {
		return
	}
	sp.done = true
	sp.run.drafter.Close()
	sp.run.snap.free()
	if sp.rows != nil {
		sp.rows.Free()
		sp.rows = nil
	}
	tensor.Free(sp.hidden)
	sp.hidden = nil
	sp.run.finishStats(r.q)
}
