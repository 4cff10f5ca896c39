package generate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// Stream is one generation in progress. Iterate Tokens once, then read
// Stats; Close frees what the stream owns.
type Stream struct {
	ctx    context.Context
	m      Model
	prompt []int32
	o      Options
	be     tensor.Backend
	runner StepRunner // the backend's, or nil
	mem    MemoryInfo
	smp    *sampler.Sampler
	caches []kv.Cache
	owned  bool // the stream made the caches and frees them
	plan   kv.QuantPlan
	// maskReady says the grammar mask already holds the next step's
	// allowed tokens (JumpExact filled it looking for forced ones).
	maskReady bool
	quant     bool
	vocab     int
	stats     Stats
	used      bool
	err       error
	closed    bool
}

// Stats returns the statistics so far; after Tokens' loop ends (however
// it ends) they are final.
func (s *Stream) Stats() Stats { return s.stats }

// Err is the error that ended the stream, if any (it was also yielded).
func (s *Stream) Err() error { return s.err }

// Caches returns the caches the stream writes to (owned by the stream
// unless they were Options.Caches or TakeCaches was called).
func (s *Stream) Caches() []kv.Cache { return s.caches }

// TakeCaches hands the caches to the caller (to put into a PromptCache,
// say, with Stats().CacheTokens): Close no longer frees them.
func (s *Stream) TakeCaches() []kv.Cache {
	s.owned = false
	return s.caches
}

// Close frees the sampler and the caches the stream owns. It is safe to
// call more than once.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.smp.Free()
	if s.owned {
		for _, c := range s.caches {
			if c != nil {
				c.Free()
			}
		}
	}
	s.caches = nil
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

// Tokens runs the generation, yielding each token with a nil error; a
// failure is yielded last as (Token{}, err). Leaving the loop early stops
// generation at once (the in-flight step is completed and freed) and
// Stats are final afterwards. A Stream can be iterated once.
func (s *Stream) Tokens() iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		if s.used || s.closed {
			yield(Token{}, errors.New("generate: stream already consumed or closed"))
			return
		}
		s.used = true
		if err := s.run(yield); err != nil {
			s.err = err
			if s.stats.StopReason == "" {
				s.stats.StopReason = StopError
			}
			if !errors.Is(err, errConsumer) {
				yield(Token{}, err)
			}
		}
		if s.mem != nil {
			if p, err := s.mem.PeakMemory(); err == nil {
				s.stats.PeakMemory = p
			}
		}
	}
}

// errConsumer marks the end the consumer chose; it is not yielded.
var errConsumer = errors.New("generate: consumer stopped")

// pipelinable reports whether step n+1 can be built before step n's token
// is on the host: nothing that needs the token on the host (a grammar, the
// sampler's history-based penalties) may be on.
func (s *Stream) pipelinable() bool {
	return s.o.Grammar == nil && s.smp.HistoryWindow() == 0
}

// room is how many tokens may still be generated after used ones (-1: no cap).
func (s *Stream) room(used int) int {
	if s.o.MaxTokens < 0 {
		return -1
	}
	return s.o.MaxTokens - used
}

// recent is the tail of h that the sampler's penalties read: passing only
// that keeps the sampler's per-step work independent of the context length.
func recent(h []int32, window int) []int32 { return h[max(0, len(h)-window):] }

func (s *Stream) run(yield func(Token, error) bool) (err error) {
	defer tensor.Recover(&err)
	start := time.Now()
	total := len(s.prompt)
	pos := s.stats.CachedTokens
	cacheToks := slices.Clone(s.prompt[:pos])
	defer func() { s.stats.CacheTokens = cacheToks }()
	snap := s.o.SnapshotAt
	fired := s.o.OnPrefillDone == nil || snap < pos
	fire := func() {
		if !fired && pos == snap {
			fired = true
			s.o.OnPrefillDone(s.caches, pos)
		}
	}
	fire()
	cancelled := func() bool {
		if s.ctx != nil && s.ctx.Err() != nil {
			s.stats.StopReason = StopCancelled
			return true
		}
		return false
	}
	// Prefill all but the last prompt token, in chunks split at the snapshot.
	for total-pos > 1 {
		if cancelled() {
			return s.ctx.Err()
		}
		n := min(s.o.PrefillChunkSize, total-1-pos)
		if !fired && pos < snap && snap < pos+n {
			n = snap - pos
		}
		ids := s.prompt[pos : pos+n]
		if err := s.onBackend(func() error { return s.prefillChunk(ids) }); err != nil {
			return err
		}
		cacheToks = append(cacheToks, s.prompt[pos:pos+n]...)
		pos += n
		if s.o.OnPrefillProgress != nil {
			s.o.OnPrefillProgress(pos, total)
		}
		fire()
		runtime.Gosched() // let a server's other goroutines run between chunks
	}
	if cancelled() {
		return s.ctx.Err()
	}

	pipelined := s.pipelinable()
	s.stats.Pipelined = pipelined
	window := s.smp.HistoryWindow()
	history := slices.Clone(recent(s.prompt, window))
	var mask []int32
	if s.o.Grammar != nil {
		mask = make([]int32, (s.vocab+31)/32)
	}
	// Step 0: the last prompt token alone — with jump-forward, followed by
	// the text the grammar forces at the start, unless a snapshot of the
	// caches is still due after this step.
	jf := s.jumpForwarder()
	exact := s.exactJump()
	var lead []int32
	if fired && (exact || jf != nil) {
		room := s.room(1) // leave room for a sampled token
		if exact {
			lead, s.maskReady, err = s.forcedRun(mask, room)
		} else {
			lead, err = s.leading(jf, room)
		}
		if err != nil {
			return err
		}
		s.stats.ForcedTokens += len(lead)
		history = append(history, lead...)
	}
	if g := s.o.Grammar; exact && g.IsTerminated() {
		// The forced tokens ended the grammar (with a stop token that is
		// not an EOS token): nothing is left to sample.
		for _, t := range lead {
			s.stats.GeneratedTokens++
			if !yield(Token{ID: t, Index: s.stats.GeneratedTokens - 1, Logprob: s.forcedLogprob(exact), Forced: true}, nil) {
				s.stats.StopReason = StopConsumer
				return errConsumer
			}
		}
		s.stats.StopReason = StopGrammar
		return nil
	}
	in := append(slices.Clone(s.prompt[total-1:]), lead...)
	cur, err := s.dispatch(func() *tensor.Array { return s.hostIDs(in) }, recent(history, window), mask)
	if err != nil {
		return err
	}
	cacheToks = append(cacheToks, in...)
	pos = total
	defer func() { cur.free() }()
	fire()

	var first time.Time
	// n counts the tokens yielded so far; a step yields one sampled token
	// and, with jump-forward, the forced tokens after it.
	n := 0
	for _, t := range lead {
		s.stats.GeneratedTokens++
		if !yield(Token{ID: t, Index: n, Logprob: s.forcedLogprob(exact), Forced: true}, nil) {
			s.stats.StopReason = StopConsumer
			return errConsumer
		}
		n++
	}
	for {
		more := s.o.MaxTokens < 0 || n+1 < s.o.MaxTokens
		var next *pending
		var res sampler.Result
		read := false
		// One Run (one hand-off on MLX) per pipelined step: dispatch step
		// n+1 on step n's (still lazy) token, then read step n's back.
		err := s.onBackend(func() (err error) {
			if pipelined && more && !cancelled() {
				prev := cur.st.Tokens
				next, err = s.dispatch(func() *tensor.Array { return tensor.Reshape(prev, 1, 1) }, nil, nil)
				if err != nil {
					return err
				}
			}
			read = true
			res = cur.st.Results()[0] // blocks; frees the step's arrays
			return nil
		})
		if read {
			cur.st = nil // Results freed it, even on failure
		}
		if err != nil {
			next.free()
			return err
		}
		cur = next
		now := time.Now()
		if first.IsZero() {
			first = now
			s.stats.PrefillMs = msSince(start, now)
			if s.stats.PrefillMs > 0 {
				s.stats.PrefillTPS = float64(s.stats.PrefillTokens) / (s.stats.PrefillMs / 1000)
			}
		} else {
			s.stats.DecodeMs = msSince(first, now)
			s.stats.DecodeTPS = float64(n-len(lead)) / (s.stats.DecodeMs / 1000) // tokens after the first sampled one
		}
		id := int32(res.Token)
		if next != nil {
			cacheToks = append(cacheToks, id) // step n+1 wrote its KV
		}
		if g := s.o.Grammar; g != nil {
			if !g.AcceptToken(res.Token) {
				return fmt.Errorf("generate: the grammar rejected token %d, which its mask allowed", id)
			}
		}
		if slices.Contains(s.o.EOS, id) {
			s.stats.StopReason = StopEOS
			return nil
		}
		step := []int32{id}
		if exact {
			f, ready, err := s.forcedRun(mask, s.room(n+1))
			if err != nil {
				return err
			}
			s.maskReady = ready
			step = append(step, f...)
			s.stats.ForcedTokens += len(f)
		}
		if jf != nil {
			f, err := s.forced(jf, id, s.room(n))
			if err != nil {
				return err
			}
			if f != nil {
				step = f
				s.stats.ForcedTokens += len(f) - 1
			}
		}
		for i, t := range step {
			tok := Token{ID: t, Index: n, Logprob: res.Logprob, Top: res.Top}
			if i > 0 || t != id {
				tok.Logprob, tok.Top, tok.Forced = s.forcedLogprob(exact), nil, true
			}
			n++
			s.stats.GeneratedTokens++
			if !yield(tok, nil) {
				s.stats.StopReason = StopConsumer
				return errConsumer
			}
		}
		if g := s.o.Grammar; g != nil && g.IsTerminated() {
			s.stats.StopReason = StopGrammar
			return nil
		}
		if s.o.MaxTokens >= 0 && n >= s.o.MaxTokens {
			s.stats.StopReason = StopLength
			return nil
		}
		if cancelled() {
			return s.ctx.Err()
		}
		if !pipelined {
			history = recent(append(history, step...), window)
			cur, err = s.dispatch(func() *tensor.Array { return s.hostIDs(step) }, history, mask)
			if err != nil {
				return err
			}
			cacheToks = append(cacheToks, step...)
		}
		if cur == nil {
			return errors.New("generate: internal error: no step in flight")
		}
		if s.stats.DecodeSteps%256 == 255 && s.mem != nil {
			_ = s.mem.ClearCache()
		}
	}
}

// jumpForwarder returns the grammar's JumpForwarder when canonical
func msSince(a, b time.Time) float64 { return float64(b.Sub(a).Nanoseconds()) / 1e6 }

// hostIDs makes a [1, n] int32 array of ids.
func (s *Stream) hostIDs(ids []int32) *tensor.Array {
	raw := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return tensor.FromBytesOn(s.be, raw, []int{1, len(ids)}, tensor.Int32, false)
}

// quantize converts caches that reached the quantization start.
func (s *Stream) quantize() error {
	if !s.quant {
		return nil
	}
	_, err := kv.MaybeQuantize(s.caches, s.plan)
	return err
}

// prefillChunk runs ids through the model for their KV only, evaluates it
// and clears the allocator cache.
func (s *Stream) prefillChunk(ids []int32) (err error) {
	sc := tensor.NewScope()
	defer sc.Close()
	h, err := s.m.Forward(s.hostIDs(ids), s.caches)
	if err != nil {
		return err
	}
	tensor.Eval(h)
	h.Free()
	if err := s.quantize(); err != nil {
		return err
	}
	if s.mem != nil {
		_ = s.mem.ClearCache()
	}
	return nil
}

// onBackend runs f inside the backend's Run when it is a StepRunner (so
// that its tensor ops are not handed off one by one), else directly. A
// tensor panic inside f comes back as the error.
func (s *Stream) onBackend(f func() error) (err error) {
	if s.runner == nil {
		return f()
	}
	defer tensor.Recover(&err)
	s.runner.Run(func() { err = f() })
	return err
}

// dispatch runs the array input makes (consumed: freed here) through the
// model, samples the last position and starts computing it (AsyncEval).
// input runs inside the step's Run, so making it costs no hand-off of its
// own. With a grammar, the mask is filled while the forward pass is in
// flight, outside Run: it is host work that other users of the backend
// need not wait behind.
func (s *Stream) dispatch(input func() *tensor.Array, history []int32, mask []int32) (p *pending, err error) {
	defer tensor.Recover(&err)
	sc := tensor.NewScope()
	defer sc.Close()
	s.stats.DecodeSteps++
	var logits *tensor.Array
	forward := func() error {
		in := input()
		h, err := s.m.Forward(in, s.caches)
		in.Free()
		if err != nil {
			return err
		}
		if t := h.Dim(1); t > 1 {
			h = tensor.SliceAxis(h, 1, t-1, t)
		}
		if logits, err = s.m.Logits(h); err != nil {
			return err
		}
		logits = tensor.Reshape(logits, 1, logits.Dim(-1))
		if err := s.quantize(); err != nil {
			return err
		}
		if mask != nil {
			tensor.AsyncEval(logits)
		}
		return nil
	}
	sample := func() error {
		st, err := s.smp.Step(logits, history, mask)
		if err != nil {
			return err
		}
		tensor.Detach(st.Arrays()...) // the step outlives this scope; pending.free or Results frees it
		tensor.AsyncEval(st.Arrays()...)
		p = &pending{st: st}
		return nil
	}
	if mask == nil {
		err = s.onBackend(func() error {
			if err := forward(); err != nil {
				return err
			}
			return sample()
		})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	if err := s.onBackend(forward); err != nil {
		return nil, err
	}
	if !s.maskReady {
		if err := s.o.Grammar.FillNextTokenBitmask(mask); err != nil {
			return nil, fmt.Errorf("generate: grammar mask: %w", err)
		}
	}
	s.maskReady = false
	if err := s.onBackend(sample); err != nil {
		return nil, err
	}
	return p, nil
}
