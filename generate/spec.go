package generate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultNumDraft is γ, the tokens drafted per round, when
// Speculation.NumDraft is 0 and a draft model drafts (mlx-lm's
// num_draft_tokens default is 2; the seed used 3).
const DefaultNumDraft = 3

// DefaultLookupDraft is γ for prompt lookup when Speculation.NumDraft is
// 0: a lookup draft costs nothing to make, so it proposes more.
const DefaultLookupDraft = 10

// Speculation turns on speculative decoding (Options.Speculation): each
// round a draft source proposes up to NumDraft tokens, the target model
// runs them through one multi-token forward pass after the pending token,
// and an accept walk keeps the longest prefix the target agrees with plus
// one token of its own (the correction after a rejection, the bonus after
// an all-accept). The caches then drop the rejected tokens.
//
// Acceptance: with temperature 0 (or Exact) a draft is accepted when it
// equals the token the target's own sampling step chooses at that
// position, so the output is token for token the output without
// speculation (bit for bit on the CPU backend, whose kernels give a
// position the same logits in a multi-token pass as alone; in bfloat16 on
// other backends up to near-ties). With temperature > 0 and !Exact it is
// speculative sampling (Leviathan et al. 2023, Chen et al. 2023): a draft
// d drawn from q is accepted with probability min(1, p(d)/q(d)), else the
// token is drawn from the residual max(p − q, 0) normalised, which leaves
// the output distributed as the target's p; the coin flips come from the
// request's seeded random stream, so a seeded run is reproducible.
//
// Rollback: caches that can trim (plain, quantized, TurboQuant, rotating
// ones inside their window) drop the rejected tokens; caches that cannot
// (a sliding-window ring past its window, recurrent state) are
// snapshotted (kv.Cache.State) before a round that would leave them
// untrimmable, restored after a rejection, and the accepted tokens are
// fed again at the start of the next round's forward pass (so that
// replay costs no extra pass).
//
// Grammars: drafts are made without the mask; the accept walk applies the
// mask at each position and the grammar advances only over emitted
// tokens. Speculation excludes JumpForward.
type Speculation struct {
	// NumDraft is γ, the most tokens drafted per round (0: DefaultNumDraft,
	// or DefaultLookupDraft for prompt lookup alone).
	NumDraft int
	// Draft is a draft model with the target's vocabulary; its caches are
	// made per generation and kept in step with the target's.
	Draft Model
	// Lookup turns on prompt lookup (when Draft is nil): drafts are the
	// tokens that followed the longest earlier occurrence of the sequence's
	// trailing n-gram, NgramMax ≥ n ≥ NgramMin.
	Lookup bool
	// NgramMin and NgramMax bound the n-gram prompt lookup matches
	// (0: DefaultNgramMin, DefaultNgramMax).
	NgramMin, NgramMax int
	// Auto chooses γ each round, up to NumDraft (0: DefaultAutoMaxDraft),
	// to maximise the tokens per second it expects from the acceptance
	// and the target's and draft's forward times measured so far (see
	// autoGamma); 0 drafts (plain decoding) is one of the choices.
	Auto bool
	// Exact keeps exact-match acceptance at temperature > 0 (the target's
	// own draw must equal the draft): lossless and, with a seed, the same
	// tokens as without speculation, but it accepts less.
	Exact bool
	// Drafter, when set, makes the draft source for a generation (it
	// overrides Draft and Lookup); the loop closes what it returns.
	Drafter func(DraftInfo) (Drafter, error)
}

// DraftInfo is what a Drafter factory learns about the generation.
type DraftInfo struct {
	// Vocab is the target's vocabulary size.
	Vocab int
	// Sampler are the request's sampling parameters.
	Sampler sampler.Params
	// Backend is the target's backend.
	Backend tensor.Backend
	// PrefillChunkSize is the request's prefill chunk.
	PrefillChunkSize int
}

// Drafter proposes the tokens a speculative round verifies.
type Drafter interface {
	// Draft proposes up to n tokens to follow tokens (the prompt and every
	// token emitted so far, the newest last). r is the request's random
	// stream for a drafter that samples; it is nil when the round uses
	// exact-match acceptance, where a drafter should propose its most
	// likely tokens.
	Draft(tokens []int32, n int, r *SpecRand) (Draft, error)
	// Close frees what the drafter holds.
	Close()
}

// Draft is a drafter's proposal.
type Draft struct {
	// Tokens are the drafted ids, in order.
	Tokens []int32
	// Probs, when set, holds for each token the distribution q (V
	// probabilities) it was drawn from; nil means the tokens were chosen
	// deterministically (q is a point mass on each).
	Probs [][]float32
}

// SpecRand hands out uniform numbers from the request's random stream
// (the sampler's key), a block per key split.
type SpecRand struct {
	smp *sampler.Sampler
	buf []float64
}

// Float64 returns the next uniform number in [0, 1).
func (r *SpecRand) Float64() (float64, error) {
	if len(r.buf) == 0 {
		u, err := r.smp.Uniforms(64)
		if err != nil {
			return 0, err
		}
		r.buf = u
	}
	v := r.buf[0]
	r.buf = r.buf[1:]
	return v, nil
}

// SpecStats are speculative decoding's statistics (Stats.Speculation).
type SpecStats struct {
	// NumDraft is γ, the most tokens a round drafted.
	NumDraft int `json:"numDraft"`
	// Drafted, Accepted and Rejected count draft tokens: proposed, kept,
	// thrown away (Drafted − Accepted).
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	// AcceptanceRate is Accepted / Drafted.
	AcceptanceRate float64 `json:"acceptanceRate"`
	// TargetCalls counts the target's decode forward passes; Rounds the
	// rounds that verified at least one draft.
	TargetCalls int `json:"targetCalls"`
	Rounds      int `json:"rounds"`
	// DraftCalls counts the draft model's forward passes.
	DraftCalls int `json:"draftCalls,omitempty"`
	// AcceptanceLengths[a] counts the rounds that accepted a drafts.
	AcceptanceLengths []int `json:"acceptanceLengths"`
	// TokensPerForward is generated tokens per target forward pass.
	TokensPerForward float64 `json:"tokensPerForward"`
	// ForwardsSaved is generated tokens − target forward passes.
	ForwardsSaved int `json:"forwardsSaved"`
	// DraftedByPos[i] and AcceptedByPos[i] count the drafts at position i
	// of a round, proposed and accepted.
	DraftedByPos  []int `json:"draftedByPos"`
	AcceptedByPos []int `json:"acceptedByPos"`
	// Restores counts rounds that rolled back by restoring a snapshot
	// (caches that could not trim) instead of trimming.
	Restores int `json:"restores,omitempty"`
}

// specOn reports whether o asks for speculative decoding.
func specOn(o *Options) bool {
	sp := o.Speculation
	return sp != nil && (sp.Draft != nil || sp.Lookup || sp.Drafter != nil)
}

// checkSpec validates o.Speculation for target m.
func checkSpec(o *Options, m Model) error {
	sp := o.Speculation
	if !specOn(o) {
		return nil
	}
	if sp.NumDraft < 0 {
		return fmt.Errorf("generate: number of draft tokens %d", sp.NumDraft)
	}
	if o.JumpForward {
		return errors.New("generate: speculative decoding excludes jump-forward")
	}
	if sp.Draft != nil && sp.Draft.VocabSize() != m.VocabSize() {
		return fmt.Errorf("generate: the draft model's vocabulary (%d tokens) differs from the target's (%d tokens)", sp.Draft.VocabSize(), m.VocabSize())
	}
	if sp.Lookup && sp.Draft == nil {
		lo, hi := ngramBounds(sp)
		if lo < 1 || hi < lo {
			return fmt.Errorf("generate: prompt lookup n-gram sizes %d..%d", lo, hi)
		}
	}
	return nil
}

// numDraft is γ for the request.
func numDraft(sp *Speculation) int {
	switch {
	case sp.Auto && sp.NumDraft == 0:
		return DefaultAutoMaxDraft
	case sp.NumDraft > 0:
		return sp.NumDraft
	case sp.Draft == nil && sp.Lookup && sp.Drafter == nil:
		return DefaultLookupDraft
	}
	return DefaultNumDraft
}

// newDrafter makes the generation's draft source.
func (s *Stream) newDrafter() (Drafter, error) {
	return makeDrafter(s.q.o.Speculation, DraftInfo{Vocab: s.m.VocabSize(), Sampler: s.q.o.Sampler, Backend: s.be, PrefillChunkSize: s.chunk})
}

// makeDrafter makes the draft source sp asks for (a lone Stream's or a
// batch row's).
func makeDrafter(sp *Speculation, info DraftInfo) (Drafter, error) {
	switch {
	case sp.Drafter != nil:
		return sp.Drafter(info)
	case sp.Draft != nil:
		return NewModelDrafter(sp.Draft, info)
	}
	lo, hi := ngramBounds(sp)
	return NewLookupDrafter(lo, hi), nil
}

// specRun is the state of one speculative generation.
type specRun struct {
	gamma    int
	sampling bool // speculative sampling (temperature > 0, !Exact)
	drafter  Drafter
	rnd      *SpecRand
	auto     *autoGamma // nil: γ fixed
	snap     cacheSnap
	// firstToks are the tokens the first round emitted: those after its
	// first one came without decode time of their own
	firstToks int
	st        SpecStats
}

// newSpecRun starts the speculative state of sequence q with drafter d.
func newSpecRun(q *seq, d Drafter) *specRun {
	sp := q.o.Speculation
	r := &specRun{gamma: numDraft(sp), drafter: d, rnd: &SpecRand{smp: q.smp}}
	r.sampling = q.o.Sampler.Temperature > 0 && !sp.Exact
	if sp.Auto {
		r.auto = newAutoGamma(r.gamma)
	}
	r.st.NumDraft = r.gamma
	r.st.AcceptanceLengths = make([]int, r.gamma+1)
	r.st.DraftedByPos = make([]int, r.gamma)
	r.st.AcceptedByPos = make([]int, r.gamma)
	return r
}

// runSpec is Stream.run's decode loop when speculation is on: rounds of
// draft, one target forward pass over [pending…, drafts…], the accept
// walk, rollback, delivery.
func (s *Stream) runSpec(yield func(Token, error) bool) error {
	q := s.q
	d, err := s.newDrafter()
	if err != nil {
		return fmt.Errorf("generate: draft source: %w", err)
	}
	if d == nil {
		return errors.New("generate: the draft source factory returned no drafter")
	}
	r := newSpecRun(q, d)
	defer func() {
		d.Close()
		r.snap.free()
		r.finishStats(q)
	}()
	s.prefillObs, _ = d.(PrefillObserver)
	err = s.prefill()
	s.prefillObs = nil
	if err != nil {
		return err
	}

	in := slices.Clone(q.prompt[len(q.prompt)-1:]) // fed next: not in the caches yet
	ctxToks := slices.Clone(q.prompt)              // prompt and output; its tail is in
	for {
		if s.cancelled() {
			return s.ctx.Err()
		}
		k := r.gamma
		if r.auto != nil {
			k = r.auto.pick(len(in))
		}
		if room := q.room(q.n); room >= 0 {
			k = min(k, room-1)
		}
		if !q.fired { // a snapshot is due once the prompt alone is in the caches
			k = 0
		}
		var dr Draft
		t0 := time.Now()
		if k > 0 {
			var rnd *SpecRand
			if r.sampling {
				rnd = r.rnd
			}
			if dr, err = d.Draft(ctxToks, k, rnd); err != nil {
				return fmt.Errorf("generate: draft: %w", err)
			}
			if len(dr.Tokens) > k {
				dr.Tokens = dr.Tokens[:k]
			}
			for _, t := range dr.Tokens {
				if t < 0 || int(t) >= q.vocab {
					return fmt.Errorf("generate: drafted token %d outside the vocabulary [0, %d)", t, q.vocab)
				}
			}
		}
		drafts := dr.Tokens
		feed := append(slices.Clone(in), drafts...)
		if len(drafts) > 0 { // without drafts nothing is rolled back
			r.snap.take(s.caches, len(feed))
		}
		t1 := time.Now()
		obs, _ := d.(TargetObserver)
		rows, hidden, err := s.verifyLogits(feed, len(drafts)+1, obs != nil)
		if err != nil {
			return err
		}
		t2 := time.Now()
		q.fed(feed...)
		q.stats.DecodeSteps++
		r.st.TargetCalls++
		toks, accepted, stop, err := q.acceptWalk(s.runner, r, rows, dr)
		rows.Free()
		if err != nil {
			tensor.Free(hidden)
			return err
		}
		q.noteRead(time.Now())
		if r.st.TargetCalls == 1 {
			r.firstToks = len(toks)
		}
		if r.auto != nil {
			draftSec := t1.Sub(t0).Seconds()
			if c, ok := d.(interface{ stepCost() float64 }); ok {
				draftSec = c.stepCost() * float64(len(drafts))
			}
			r.auto.observe(len(drafts), accepted, len(feed), t2.Sub(t1).Seconds(), draftSec)
		}
		r.st.record(len(drafts), accepted)
		// The caches hold feed; keep in and the accepted drafts.
		drop := len(drafts) - accepted
		replay, err := r.snap.rewind(s.caches, len(feed), drop)
		if err != nil {
			tensor.Free(hidden)
			return err
		}
		if replay >= 0 {
			r.st.Restores++
		}
		if obs != nil {
			err := s.onBackend(func() error { return obs.Observe(hidden, len(feed)-1-drop, s.caches, replay >= 0) })
			tensor.Free(hidden)
			if err != nil {
				return fmt.Errorf("generate: draft source: %w", err)
			}
		}
		q.cacheToks = q.cacheToks[:len(q.cacheToks)-drop]
		if replay >= 0 { // restored: the kept tokens are fed again
			in = slices.Clone(q.cacheToks[len(q.cacheToks)-replay:])
			q.cacheToks = q.cacheToks[:len(q.cacheToks)-replay]
		} else {
			in = in[:0]
		}
		if err := s.quantize(); err != nil {
			return err
		}
		q.snapshot(s.caches)
		for _, t := range toks {
			ctxToks = append(ctxToks, t.ID)
		}
		if stop == "" && len(toks) > 0 {
			in = append(in, toks[len(toks)-1].ID)
		}
		if !s.deliver(toks, yield) {
			return errConsumer
		}
		if stop == "" {
			stop = q.done()
		}
		if stop != "" {
			q.finish(stop)
			return nil
		}
		if len(toks) == 0 {
			return errors.New("generate: internal error: a speculative round emitted nothing")
		}
		if q.stats.DecodeSteps%256 == 255 && s.mem != nil {
			_ = s.mem.ClearCache()
		}
	}
}

// verifyLogits runs feed through the target and returns the logits of its
// last n positions, [n, V] in the model's dtype, evaluated (the caller
// frees them), and with keep the final hidden states of every fed
// position ([1, len(feed), D], evaluated, the caller's too).
func (s *Stream) verifyLogits(feed []int32, n int, keep bool) (rows, hidden *tensor.Array, err error) {
	err = s.onBackend(func() error {
		sc := tensor.NewScope()
		defer sc.Close()
		h, err := s.m.Forward(s.hostIDs(feed), s.caches)
		if err != nil {
			return err
		}
		if keep {
			hidden = h
			tensor.Eval(hidden)
			sc.Keep(hidden)
			tensor.Detach(hidden)
		}
		if t := h.Dim(1); t > n {
			h = tensor.SliceAxis(h, 1, t-n, t)
		}
		l, err := s.m.Logits(h)
		if err != nil {
			return err
		}
		rows = tensor.Reshape(l, n, l.Dim(-1))
		tensor.Eval(rows)
		sc.Keep(rows)
		tensor.Detach(rows)
		return nil
	})
	if err != nil && hidden != nil {
		hidden.Free()
		hidden = nil
	}
	return rows, hidden, err
}

// acceptWalk goes over the verified positions in order: at each the
// target's token is chosen (the grammar's mask applied, the history so
// far penalised), the draft kept while it agrees, and the first
// disagreement (or the bonus after the last draft) ends the round. rows
// are the target's logits at the round's positions ([len(drafts)+1, V],
// the sequence's rows of a forward pass, alone or in a batch); runner is
// the backend's StepRunner, or nil. It returns the tokens to deliver, how
// many drafts were accepted, and a stop reason when an EOS token or the
// grammar ended the sequence. It is a seq method so that a batch driver
// can verify each row's drafts as Stream does.
func (q *seq) acceptWalk(runner StepRunner, r *specRun, rows *tensor.Array, dr Draft) (toks []Token, accepted int, stop string, err error) {
	drafts := dr.Tokens
	// Greedy without a grammar or history penalties: every position's
	// token depends on its row alone, so one sampler step over all rows
	// (one read-back) gives what the walk would get row by row.
	var all []sampler.Result
	if !r.sampling && q.o.Sampler.Temperature == 0 && q.mask == nil && q.window == 0 && len(drafts) > 0 {
		err := onRunner(runner, func() error {
			st, err := q.smp.Step(rows, nil, nil)
			if err != nil {
				return err
			}
			all = st.Results()
			return nil
		})
		if err != nil {
			return nil, 0, "", err
		}
	}
	for i := 0; i <= len(drafts); i++ {
		if err := q.fillMask(); err != nil {
			return nil, 0, "", err
		}
		var res sampler.Result
		ok := false
		err := onRunner(runner, func() (err error) {
			if all != nil {
				res = all[i]
				ok = i < len(drafts) && int32(res.Token) == drafts[i]
				return nil
			}
			row := tensor.SliceAxis(rows, 0, i, i+1)
			defer row.Free()
			if r.sampling {
				var qrow []float32
				d := int32(-1)
				if i < len(drafts) {
					d = drafts[i]
					if dr.Probs != nil {
						qrow = dr.Probs[i]
					}
				}
				res, ok, err = q.specSample(r.rnd, row, d, qrow)
				return err
			}
			var st *sampler.Step
			if st, err = q.smp.Step(row, recent(q.history, q.window), q.mask); err != nil {
				return err
			}
			res = st.Results()[0]
			ok = i < len(drafts) && int32(res.Token) == drafts[i]
			return nil
		})
		if err != nil {
			return nil, 0, "", err
		}
		id := int32(res.Token)
		if g := q.o.Grammar; g != nil && !g.AcceptToken(res.Token) {
			return nil, 0, "", fmt.Errorf("generate: the grammar rejected token %d, which its mask allowed", id)
		}
		if slices.Contains(q.o.EOS, id) {
			return toks, i, StopEOS, nil
		}
		toks = append(toks, Token{ID: id, Index: q.n, Logprob: res.Logprob, Top: res.Top})
		q.n++
		if q.window > 0 {
			q.history = recent(append(q.history, id), q.window)
		}
		if !ok {
			return toks, i, "", nil
		}
		if g := q.o.Grammar; g != nil && g.IsTerminated() {
			return toks, i + 1, StopGrammar, nil
		}
	}
	return toks, len(drafts), "", nil // unreachable: the bonus position is never ok
}

// specSample is one position of speculative sampling: the target's
// distribution p at row, the draft d (−1 at the bonus position) drawn
// from qrow (nil: a point mass on d), the coins from rnd. It returns the
// token, with its logprob when asked, and whether it is the accepted
// draft.
func (q *seq) specSample(rnd *SpecRand, row *tensor.Array, d int32, qrow []float32) (res sampler.Result, ok bool, err error) {
	lp, pr, err := q.smp.Distribution(row, recent(q.history, q.window), q.mask)
	if err != nil {
		return res, false, err
	}
	defer tensor.Free(lp, pr)
	p := pr.Float32s()
	u, err := rnd.Float64()
	if err != nil {
		return res, false, err
	}
	v, err := rnd.Float64()
	if err != nil {
		return res, false, err
	}
	tok, ok := acceptOrResample(p, d, qrow, u, v)
	res = sampler.Result{Token: tok, Logprob: float32(math.NaN())}
	sp := q.o.Sampler
	if sp.Logprobs || sp.TopLogprobs > 0 {
		lps := lp.Float32s()
		res.Logprob = lps[tok]
		if sp.TopLogprobs > 0 {
			res.Top = topLogprobs(lps, sp.TopLogprobs)
		}
	}
	return res, ok, nil
}

// acceptOrResample is speculative sampling's decision at one position: a
// draft d (−1: none, the bonus position) drawn from q (nil: a point mass
// on d) is accepted when u < p(d)/q(d); otherwise the token is drawn by
// inverse CDF with v from the residual max(p − q, 0) normalised (from p
// itself at the bonus position, or when the residual has no mass left).
func acceptOrResample(p []float32, d int32, q []float32, u, v float64) (int, bool) {
	if d >= 0 {
		qd := 1.0
		if q != nil {
			qd = float64(q[d])
		}
		if qd > 0 && u*qd < float64(p[d]) {
			return int(d), true
		}
		if qd <= 0 && p[d] > 0 { // q gave d no mass (it should not have drawn it): accept as p would
			return int(d), true
		}
		total := 0.0
		for i, pi := range p {
			total += residual(pi, i, d, q)
		}
		if total > 0 {
			x := v * total
			last := -1
			for i, pi := range p {
				r := residual(pi, i, d, q)
				if r <= 0 {
					continue
				}
				last = i
				if x -= r; x < 0 {
					return i, false
				}
			}
			return last, false // rounding left x ≥ 0 after the last term
		}
	}
	return drawFrom(p, v), false
}

// residual is max(p(i) − q(i), 0), q a point mass on d when nil.
func residual(pi float32, i int, d int32, q []float32) float64 {
	qi := 0.0
	if q != nil {
		qi = float64(q[i])
	} else if int32(i) == d {
		qi = 1
	}
	return max(float64(pi)-qi, 0)
}

// drawFrom draws an index from the (possibly unnormalised) weights p by
// inverse CDF with v in [0, 1).
func drawFrom(p []float32, v float64) int {
	total := 0.0
	for _, x := range p {
		total += float64(x)
	}
	x := v * total
	last := 0
	for i, pi := range p {
		if pi <= 0 {
			continue
		}
		last = i
		if x -= float64(pi); x < 0 {
			return i
		}
	}
	return last
}

// topLogprobs is the k most likely tokens of a row of logprobs, the most
// likely first (ties: the lower id first).
func topLogprobs(lps []float32, k int) []sampler.TokenLogprob {
	idx := make([]int, len(lps))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case lps[a] > lps[b]:
			return -1
		case lps[a] < lps[b]:
			return 1
		}
		return 0
	})
	k = min(k, len(idx))
	out := make([]sampler.TokenLogprob, k)
	for i := range k {
		out[i] = sampler.TokenLogprob{ID: idx[i], Logprob: lps[idx[i]]}
	}
	return out
}

// record counts a round that verified drafted drafts and accepted some
// (nothing when it drafted none). The per-position slices must hold γ
// entries and AcceptanceLengths γ+1.
func (st *SpecStats) record(drafted, accepted int) {
	if drafted == 0 {
		return
	}
	st.Rounds++
	st.Drafted += drafted
	st.Accepted += accepted
	st.AcceptanceLengths[accepted]++
	for i := range drafted {
		st.DraftedByPos[i]++
		if i < accepted {
			st.AcceptedByPos[i]++
		}
	}
}

// finishStats fills the derived statistics and puts them in q's.
func (r *specRun) finishStats(q *seq) {
	st := r.st
	st.Rejected = st.Drafted - st.Accepted
	if st.Drafted > 0 {
		st.AcceptanceRate = float64(st.Accepted) / float64(st.Drafted)
	}
	gen := q.stats.GeneratedTokens
	if st.TargetCalls > 0 {
		st.TokensPerForward = float64(gen) / float64(st.TargetCalls)
	}
	st.ForwardsSaved = gen - st.TargetCalls
	if q.stats.DecodeMs > 0 { // the decode rate counts from the first round's last token
		q.stats.DecodeTPS = float64(q.n-q.lead-max(r.firstToks-1, 0)) / (q.stats.DecodeMs / 1000)
	}
	if c, ok := r.drafter.(interface{ forwards() int }); ok {
		st.DraftCalls = c.forwards()
	}
	q.stats.Speculation = &st
}

// cacheSnap holds snapshots of the caches that a round's forward pass
// would leave unable to trim, so that a rejection can restore them.
type cacheSnap struct {
	states []kv.State
	taken  []bool
	any    bool
}

// untrimmableAfter reports whether c cannot drop tokens after n more are
// written: it cannot now, or it is a window that n more tokens exceed.
func untrimmableAfter(c kv.Cache, n int) bool {
	if !c.IsTrimmable() {
		return true
	}
	if w, ok := c.(interface{ MaxSize() int }); ok && c.Offset()+n >= w.MaxSize() {
		return true
	}
	return false
}

// take snapshots the caches that n more tokens would leave untrimmable
// (none when all will trim).
func (cs *cacheSnap) take(caches []kv.Cache, n int) {
	cs.free()
	for i, c := range caches {
		if c == nil || !untrimmableAfter(c, n) {
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

// rewind drops the last drop of the n tokens the round wrote. When every
// cache trims it trims them and returns −1; otherwise it restores the
// snapshots, trims the other caches by all n, and returns how many tokens
// (n − drop) must be fed again. The snapshots are freed either way.
func (cs *cacheSnap) rewind(caches []kv.Cache, n, drop int) (replay int, err error) {
	defer cs.free()
	if drop == 0 {
		return -1, nil
	}
	if !cs.any {
		for i, c := range caches {
			if c == nil {
				continue
			}
			if !c.IsTrimmable() {
				return 0, fmt.Errorf("generate: layer %d's cache cannot drop rejected draft tokens", i)
			}
			if got := c.Trim(drop); got != drop {
				return 0, fmt.Errorf("generate: layer %d's cache dropped %d of %d rejected draft tokens", i, got, drop)
			}
		}
		return -1, nil
	}
	for i, c := range caches {
		if c == nil {
			continue
		}
		if cs.taken[i] {
			if err := c.SetState(cs.states[i]); err != nil {
				return 0, fmt.Errorf("generate: restore layer %d's cache: %w", i, err)
			}
			continue
		}
		if got := c.Trim(n); got != n {
			return 0, fmt.Errorf("generate: layer %d's cache dropped %d of %d tokens", i, got, n)
		}
	}
	return n - drop, nil
}

// free frees the snapshots.
func (cs *cacheSnap) free() {
	for i := range cs.states {
		if cs.taken[i] {
			cs.states[i].Free()
		}
	}
	cs.states, cs.taken, cs.any = nil, nil, false
}
