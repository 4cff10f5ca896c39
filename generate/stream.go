package generate

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// Stream is one generation in progress. Iterate Tokens once, then read
// Stats; Close frees what the stream owns.
//
// A Stream drives one sequence (a seq: the per-request state of sampling,
// grammar, history, stop and statistics) through the model alone: it owns
// what a batch of sequences would share — the model, the caches' forward
// passes, the backend and its StepRunner.
type Stream struct {
	ctx    context.Context
	m      Model
	q      *seq
	chunk  int // prompt tokens per prefill forward pass
	be     tensor.Backend
	runner StepRunner // the backend's, or nil
	mem    MemoryInfo
	caches []kv.Cache
	owned  bool // the stream made the caches and frees them
	plan   kv.QuantPlan
	quant  bool
	used   bool
	err    error
	closed bool
	// prefillObs reads the prompt's hidden states (a speculative draft
	// source that drafts from the target's state), or nil
	prefillObs PrefillObserver
}

// Stats returns the statistics so far; after Tokens' loop ends (however
// it ends) they are final.
func (s *Stream) Stats() Stats { return s.q.stats }

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
	s.q.smp.Free()
	if s.owned {
		for _, c := range s.caches {
			if c != nil {
				c.Free()
			}
		}
	}
	s.caches = nil
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
			reason := s.q.stats.StopReason
			if reason == "" {
				reason = StopError
			}
			s.q.finish(reason)
			if !errors.Is(err, errConsumer) {
				yield(Token{}, err)
			}
		}
		if s.mem != nil {
			if p, err := s.mem.PeakMemory(); err == nil {
				s.q.stats.PeakMemory = p
			}
		}
		s.q.stats.KVBytes = cachesBytes(s.caches)
	}
}

// errConsumer marks the end the consumer chose; it is not yielded.
var errConsumer = errors.New("generate: consumer stopped")

// run composes the sequence's pieces: prefill, the first step (with the
// tokens jump-forward forces at the start), then decode steps until the
// sequence stops. Pipelined, each step's Run dispatches step n+1 on step
// n's still lazy token before reading step n back; otherwise step n+1 is
// dispatched once step n's tokens are accepted on the host.
func (s *Stream) run(yield func(Token, error) bool) (err error) {
	defer tensor.Recover(&err)
	q := s.q
	q.start = time.Now()
	defer q.freeSteps()
	q.snapshot(s.caches)
	if specOn(&q.o) {
		return s.runSpec(yield) // it prefills once its draft source is made
	}
	if err := s.prefill(); err != nil {
		return err
	}

	pipelined := q.pipelinable()
	q.stats.Pipelined = pipelined
	in, lead, stop, err := q.firstStep()
	if err != nil {
		return err
	}
	if stop != "" {
		if !s.deliver(lead, yield) {
			return errConsumer
		}
		q.finish(stop)
		return nil
	}
	if q.cur, err = s.dispatch(func() *tensor.Array { return s.hostIDs(in) }); err != nil {
		return err
	}
	q.fed(in...)
	q.snapshot(s.caches)
	if !s.deliver(lead, yield) {
		return errConsumer
	}
	for {
		var res sampler.Result
		// One Run (one hand-off on MLX) per pipelined step: dispatch step
		// n+1 on step n's (still lazy) token, then read step n's back.
		err := s.onBackend(func() (err error) {
			if pipelined && q.more() && !s.cancelled() {
				prev := q.cur.st.Tokens
				q.ahead, err = s.dispatch(func() *tensor.Array { return tensor.Reshape(prev, 1, 1) })
				if err != nil {
					return err
				}
			}
			res = q.read() // blocks; frees the step's arrays
			return nil
		})
		if err != nil {
			return err
		}
		q.noteRead(time.Now())
		if q.cur != nil {
			q.fed(int32(res.Token)) // the step dispatched ahead wrote its KV
		}
		toks, stop, err := q.accept(res)
		if err != nil {
			return err
		}
		if stop == "" { // not EOS: deliver the step's tokens, then see whether they end it
			if !s.deliver(toks, yield) {
				return errConsumer
			}
			stop = q.done()
		}
		if stop != "" {
			q.finish(stop)
			return nil
		}
		if s.cancelled() {
			return s.ctx.Err()
		}
		if !pipelined {
			in := q.next
			if q.cur, err = s.dispatch(func() *tensor.Array { return s.hostIDs(in) }); err != nil {
				return err
			}
			q.fed(in...)
		}
		if q.cur == nil {
			return errors.New("generate: internal error: no step in flight")
		}
		if q.stats.DecodeSteps%256 == 255 && s.mem != nil {
			_ = s.mem.ClearCache()
		}
	}
}

// prefill runs the prompt but its last token through the model, in the
// chunks the sequence asks for, each inside one Run.
func (s *Stream) prefill() error {
	for {
		if s.cancelled() {
			return s.ctx.Err()
		}
		ids := s.q.nextChunk(s.chunk)
		if ids == nil {
			return nil
		}
		if err := s.onBackend(func() error { return s.prefillChunk(ids) }); err != nil {
			return err
		}
		s.q.prefilled(ids, s.caches)
		runtime.Gosched() // let a server's other goroutines run between chunks
	}
}

// cancelled reports whether the context was cancelled, recording it as
// the stop reason (which a stop found on the step in flight replaces).
func (s *Stream) cancelled() bool {
	if s.ctx != nil && s.ctx.Err() != nil {
		s.q.stats.StopReason = StopCancelled
		return true
	}
	return false
}

// deliver yields toks, counting them as generated; false when the
// consumer left the loop (the stop reason is then StopConsumer).
func (s *Stream) deliver(toks []Token, yield func(Token, error) bool) bool {
	for _, t := range toks {
		s.q.stats.GeneratedTokens++
		if !yield(t, nil) {
			s.q.finish(StopConsumer)
			return false
		}
	}
	return true
}

// hostIDs makes a [1, n] int32 array of ids.
func (s *Stream) hostIDs(ids []int32) *tensor.Array {
	return tensor.FromInt32On(s.be, ids, []int{1, len(ids)})
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
	var h *tensor.Array
	if s.prefillObs != nil { // a drafter reads every position's state
		h, err = s.m.Forward(s.hostIDs(ids), s.caches)
	} else { // the KV alone: one position's output, the least there is
		h, err = ForwardOutputs(s.m, s.hostIDs(ids), s.caches, []int32{int32(len(ids) - 1)})
	}
	if err != nil {
		return err
	}
	tensor.Eval(h)
	if s.prefillObs != nil {
		if err := s.prefillObs.ObservePrefill(h, len(s.q.cacheToks)); err != nil {
			h.Free()
			return fmt.Errorf("generate: draft source: %w", err)
		}
	}
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
func (s *Stream) onBackend(f func() error) error { return onRunner(s.runner, f) }

// onRunner runs f inside runner.Run (nil: directly); a tensor panic
// inside f comes back as the error.
func onRunner(runner StepRunner, f func() error) (err error) {
	defer tensor.Recover(&err)
	if runner == nil {
		return f()
	}
	runner.Run(func() { err = f() })
	return err
}

// dispatch runs the array input makes (consumed: freed here) through the
// model, samples the sequence's row of logits and starts computing it
// (AsyncEval). input runs inside the step's Run, so making it costs no
// hand-off of its own. With a grammar, the mask is filled while the
// forward pass is in flight, outside Run: it is host work that other
// users of the backend need not wait behind.
func (s *Stream) dispatch(input func() *tensor.Array) (p *pending, err error) {
	defer tensor.Recover(&err)
	sc := tensor.NewScope()
	defer sc.Close()
	q := s.q
	q.stats.DecodeSteps++
	var logits *tensor.Array
	forward := func() (err error) {
		if logits, err = s.lastLogits(input()); err != nil {
			return err
		}
		if q.mask != nil {
			tensor.AsyncEval(logits)
		}
		return nil
	}
	sample := func() (err error) {
		p, err = q.sample(logits)
		return err
	}
	if q.mask == nil {
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
	if err := q.fillMask(); err != nil {
		return nil, err
	}
	if err := s.onBackend(sample); err != nil {
		return nil, err
	}
	return p, nil
}

// lastLogits runs in (consumed: freed here) through the model and returns
// the logits of its last position, [1, V], after converting caches that
// reached the quantization start.
func (s *Stream) lastLogits(in *tensor.Array) (*tensor.Array, error) {
	h, err := ForwardOutputs(s.m, in, s.caches, []int32{int32(in.Dim(1) - 1)})
	in.Free()
	if err != nil {
		return nil, err
	}
	logits, err := s.m.Logits(h)
	if err != nil {
		return nil, err
	}
	logits = tensor.Reshape(logits, 1, logits.Dim(-1))
	if err := s.quantize(); err != nil {
		return nil, err
	}
	return logits, nil
}
