package generate

import (
	"fmt"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// seq is one sequence's generation state: its prompt and how much of it
// the caches hold, its sampler, grammar, mask and history, the steps in
// flight, the tokens generated against MaxTokens, its statistics and its
// stop reason. It holds no model, caches or backend: its driver runs the
// forward passes and tells the seq what they fed. Stream drives one seq
// through the model alone; a batch generator can drive many, one row of
// a batched forward pass each, through the same methods.
//
// The life of a seq, as its driver calls it:
//
//   - prefill: nextChunk gives the next prompt chunk (nil once only the
//     last prompt token is left); after its forward pass, prefilled
//     records it, reports progress and fires a due snapshot.
//   - firstStep gives the first decode step's input (the last prompt
//     token, with jump-forward followed by the tokens the grammar forces
//     at the start) and those forced tokens; after dispatching it, the
//     driver calls fed and snapshot.
//   - each decode step: the driver runs the step's input through the
//     model to one row of logits; fillMask (host work, outside any
//     StepRunner.Run) and sample turn that row into a lazy pending step,
//     kept in cur (or in ahead, when dispatched on cur's still lazy token:
//     pipelined decode). read takes cur's result back; accept turns it
//     into the tokens to deliver (the sampled one and those jump-forward
//     forces after it, see applyJump) and leaves them in next, the input
//     of the step after it when not pipelined; done says, once they are
//     delivered, whether the sequence has ended.
//   - finish records the stop reason and the final CacheTokens.
type seq struct {
	prompt []int32
	o      Options // validated (Generate filled in the defaults)
	vocab  int
	smp    *sampler.Sampler
	window int // the sampler's HistoryWindow

	exact bool          // exact jump-forward is on
	jf    JumpForwarder // the grammar's, when canonical jump-forward is on
	mask  []int32       // the grammar mask's buffer, nil without a grammar
	// maskReady says mask already holds the next step's allowed tokens
	// (exact jump-forward filled it looking for forced ones).
	maskReady bool

	fired   bool    // OnPrefillDone has fired or is not due
	history []int32 // the last window tokens of the prompt and the output
	// cur is the dispatched step whose token is read next; ahead, the
	// step dispatched on cur's lazy token (pipelined), which follows it.
	cur, ahead *pending
	next       []int32 // the last step's tokens: the next input when not pipelined
	n          int     // tokens generated so far (EOS excluded)
	lead       int     // forced tokens before the first sampled one
	// cacheToks are the tokens whose KV the caches hold, in order.
	cacheToks    []int32
	start, first time.Time // when the run started; when a token was first read back
	stats        Stats
}

// newSeq makes the state of a sequence whose first cached prompt tokens
// pre-warmed caches hold; o is validated and smp made for it.
func newSeq(prompt []int32, o Options, vocab int, smp *sampler.Sampler, cached int) *seq {
	q := &seq{prompt: slices.Clone(prompt), o: o, vocab: vocab, smp: smp, window: smp.HistoryWindow()}
	q.exact = exactJump(&q.o)
	q.jf = jumpForwarder(&q.o)
	if o.Grammar != nil {
		q.mask = make([]int32, (vocab+31)/32)
	}
	q.fired = o.OnPrefillDone == nil || o.SnapshotAt < cached
	q.history = slices.Clone(recent(q.prompt, q.window))
	q.cacheToks = slices.Clone(q.prompt[:cached])
	q.stats.PromptTokens = len(prompt)
	q.stats.CachedTokens = cached
	q.stats.PrefillTokens = len(prompt) - cached
	return q
}

// pipelinable reports whether step n+1 can be built before step n's token
// is on the host: nothing that needs the token on the host (a grammar, the
// sampler's history-based penalties) may be on.
func (q *seq) pipelinable() bool {
	return q.o.Grammar == nil && q.window == 0
}

// room is how many tokens may still be generated after used ones (-1: no cap).
func (q *seq) room(used int) int {
	if q.o.MaxTokens < 0 {
		return -1
	}
	return q.o.MaxTokens - used
}

// more reports whether a token may follow the one in flight: whether a
// pipelined driver dispatches a step ahead of reading it.
func (q *seq) more() bool {
	return q.o.MaxTokens < 0 || q.n+1 < q.o.MaxTokens
}

// recent is the tail of h that the sampler's penalties read: passing only
// that keeps the sampler's per-step work independent of the context length.
func recent(h []int32, window int) []int32 { return h[max(0, len(h)-window):] }

// nextChunk returns the prompt tokens of the next prefill chunk, at most
// size (a driver's per-step token budget may make it smaller than
// Options.PrefillChunkSize): all but the last prompt token are
// prefilled, and a chunk ends where a due snapshot falls. nil: prefill
// is done.
func (q *seq) nextChunk(size int) []int32 {
	pos, total := len(q.cacheToks), len(q.prompt)
	if total-pos <= 1 {
		return nil
	}
	n := min(size, total-1-pos)
	if snap := q.o.SnapshotAt; !q.fired && pos < snap && snap < pos+n {
		n = snap - pos
	}
	return q.prompt[pos : pos+n]
}

// endsPrefill reports whether chunk (from nextChunk) leaves only the last
// prompt token to feed, with no snapshot due in between and no grammar to
// force tokens after it: the first step is then that token alone, and a
// batch may run it in the chunk's pass.
func (q *seq) endsPrefill(chunk []int32) bool {
	end := len(q.cacheToks) + len(chunk)
	return end == len(q.prompt)-1 && q.o.Grammar == nil && (q.fired || q.o.SnapshotAt != end)
}

// prefilled records that a forward pass wrote the chunk nextChunk gave
// into caches, reports the progress and fires a snapshot that is due.
func (q *seq) prefilled(chunk []int32, caches []kv.Cache) {
	q.fed(chunk...)
	if q.o.OnPrefillProgress != nil {
		q.o.OnPrefillProgress(len(q.cacheToks), len(q.prompt))
	}
	q.snapshot(caches)
}

// fed records that a forward pass wrote the KV of ids into the caches, so
// that CacheTokens name exactly what they hold.
func (q *seq) fed(ids ...int32) { q.cacheToks = append(q.cacheToks, ids...) }

// snapshot calls OnPrefillDone when the caches hold exactly SnapshotAt
// prompt tokens and it has not fired yet.
func (q *seq) snapshot(caches []kv.Cache) {
	if !q.fired && len(q.cacheToks) == q.o.SnapshotAt {
		q.fired = true
		q.o.OnPrefillDone(caches, len(q.cacheToks))
	}
}

// firstStep prepares the first decode step, once prefill is done: in is
// the last prompt token followed, with jump-forward, by the tokens the
// grammar forces at the start (lead, delivered before any sampled token),
// unless a snapshot is still due after this step (the caches must then
// hold the prompt alone). stop is StopGrammar when the forced tokens
// ended the grammar: lead is then all there is, and no step is due.
func (q *seq) firstStep() (in []int32, lead []Token, stop string, err error) {
	var ids []int32
	if q.fired && (q.exact || q.jf != nil) {
		room := q.room(1) // leave room for a sampled token
		if q.exact {
			ids, q.maskReady, err = q.forcedRun(room)
		} else {
			ids, err = q.leading(room)
		}
		if err != nil {
			return nil, nil, "", err
		}
		q.stats.ForcedTokens += len(ids)
		q.history = append(q.history, ids...)
	}
	for i, t := range ids {
		lead = append(lead, Token{ID: t, Index: i, Logprob: q.forcedLogprob(), Forced: true})
	}
	q.n, q.lead = len(ids), len(ids)
	if q.exact && q.o.Grammar.IsTerminated() {
		// The forced tokens ended the grammar (with a stop token that is
		// not an EOS token): nothing is left to sample.
		return nil, lead, StopGrammar, nil
	}
	return append(slices.Clone(q.prompt[len(q.prompt)-1:]), ids...), lead, "", nil
}

// fillMask writes the grammar's allowed next tokens into the mask for
// the next sample, unless exact jump-forward left them there. It is host
// work: a driver does it outside StepRunner.Run, while the forward pass
// is in flight.
func (q *seq) fillMask() error {
	if q.mask == nil {
		return nil
	}
	if !q.maskReady {
		if err := q.o.Grammar.FillNextTokenBitmask(q.mask); err != nil {
			return fmt.Errorf("generate: grammar mask: %w", err)
		}
	}
	q.maskReady = false
	return nil
}

// sample turns the sequence's row of logits ([1, V], lazy; one row of a
// batch's logits as well as a lone forward pass's) into a pending step
// and starts computing it (AsyncEval): the logits processors over the
// sequence's history, the mask fillMask wrote, logprobs and the draw
// from the sequence's own random stream. The step is detached from the
// caller's scope: it is freed when read, or by freeSteps.
func (q *seq) sample(logits *tensor.Array) (*pending, error) {
	st, err := q.smp.Step(logits, recent(q.history, q.window), q.mask)
	if err != nil {
		return nil, err
	}
	tensor.Detach(st.Arrays()...)
	tensor.AsyncEval(st.Arrays()...)
	return &pending{st: st}, nil
}

// read takes cur's result back to the host (blocking) and frees its
// arrays, even when that fails; the step dispatched ahead, if any,
// becomes cur.
func (q *seq) read() sampler.Result {
	st := q.cur.st
	q.cur, q.ahead = q.ahead, nil
	return st.Results()[0]
}

// accept takes a step's result read back: the grammar advances over the
// sampled token, an EOS token ends the sequence (stop is StopEOS, with
// nothing to deliver), and applyJump adds the tokens jump-forward feeds
// after it. It returns the tokens to deliver, in order; they are also the
// next step's input (q.next) and join the history.
func (q *seq) accept(res sampler.Result) (toks []Token, stop string, err error) {
	id := int32(res.Token)
	if g := q.o.Grammar; g != nil {
		if !g.AcceptToken(res.Token) {
			return nil, "", fmt.Errorf("generate: the grammar rejected token %d, which its mask allowed", id)
		}
	}
	if slices.Contains(q.o.EOS, id) {
		return nil, StopEOS, nil
	}
	step, err := q.applyJump(id)
	if err != nil {
		return nil, "", err
	}
	toks = make([]Token, len(step))
	for i, t := range step {
		toks[i] = Token{ID: t, Index: q.n + i, Logprob: res.Logprob, Top: res.Top}
		if i > 0 || t != id {
			toks[i].Logprob, toks[i].Top, toks[i].Forced = q.forcedLogprob(), nil, true
		}
	}
	q.n += len(step)
	q.next = step
	if q.window > 0 {
		q.history = recent(append(q.history, step...), q.window)
	}
	return toks, "", nil
}

// done is the stop reason once the tokens accept gave are delivered: the
// grammar terminated or MaxTokens were generated; "" to go on.
func (q *seq) done() string {
	if g := q.o.Grammar; g != nil && g.IsTerminated() {
		return StopGrammar
	}
	if q.o.MaxTokens >= 0 && q.n >= q.o.MaxTokens {
		return StopLength
	}
	return ""
}

// noteRead updates the timing statistics when a step's token is read
// back at now: the first read ends the prefill time, each later one
// extends the decode time.
func (q *seq) noteRead(now time.Time) {
	if q.first.IsZero() {
		q.first = now
		q.stats.PrefillMs = msSince(q.start, now)
		if q.stats.PrefillMs > 0 {
			q.stats.PrefillTPS = float64(q.stats.PrefillTokens) / (q.stats.PrefillMs / 1000)
		}
		return
	}
	q.stats.DecodeMs = msSince(q.first, now)
	q.stats.DecodeTPS = float64(q.n-q.lead) / (q.stats.DecodeMs / 1000) // tokens after the first sampled one
}

func msSince(a, b time.Time) float64 { return float64(b.Sub(a).Nanoseconds()) / 1e6 }

// finish records why the sequence ended (replacing an earlier reason: a
// cancellation noticed before the last token was read gives way to EOS,
// the grammar or the length) and makes CacheTokens final.
func (q *seq) finish(reason string) {
	q.stats.StopReason = reason
	q.stats.CacheTokens = q.cacheToks
}

// freeSteps frees the steps still in flight (letting their work finish).
func (q *seq) freeSteps() {
	q.cur.free()
	q.ahead.free()
	q.cur, q.ahead = nil, nil
}

// pending is a dispatched step: the sampler's lazy outputs.
type pending struct {
	st *sampler.Step
}

func (p *pending) free() {
	if p != nil && p.st != nil {
		tensor.Eval(p.st.Arrays()...) // let in-flight work finish before its arrays go
		p.st.Free()
		p.st = nil
	}
}
