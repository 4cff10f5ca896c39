package generate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// Model is what the loop needs from a model. It is defined here, not in
// package model, so that generate depends on no concrete model; Wrap
// adapts model.Model (whose Forward takes an extra options argument).
type Model interface {
	// Forward runs ids [B, T] (int32) through the model at the caches'
	// offsets, appending to them, and returns hidden states [B, T, D] the
	// caller owns.
	Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error)
	// Logits maps hidden states [B, T, D] to logits [B, T, V] the caller owns.
	Logits(hidden *tensor.Array) (*tensor.Array, error)
	// MakeCaches returns fresh caches, one per layer (nil entries for
	// layers that read another layer's cache); the caller frees them.
	MakeCaches() []kv.Cache
	// VocabSize is V, the width of the logits.
	VocabSize() int
}

// Grammar constrains sampling to what a grammar allows. It is the subset
// of grammar.TokenMatcher the loop uses (*grammar.Matcher implements it);
// defined here so generate does not depend on package grammar.
type Grammar interface {
	// AcceptToken advances the grammar by a sampled token; false means the
	// grammar rejects it (the loop then fails: the mask should have
	// prevented it).
	AcceptToken(id int) bool
	// FillNextTokenBitmask writes the allowed next tokens: bit i%32 of word
	// i/32 is 1 when token i is allowed. The slice has ceil(V/32) words.
	FillNextTokenBitmask(mask []int32) error
	// IsTerminated reports whether the grammar accepted a stop token, after
	// which nothing more may be generated.
	IsTerminated() bool
}

// JumpForwarder is the optional part of a Grammar that jump-forward
// decoding needs (*grammar.Matcher implements it): the text the grammar
// forces next, and undoing accepted tokens so that the sampled token can
// be replaced by the canonical tokenization of itself plus that text.
type JumpForwarder interface {
	// JumpForward returns the longest text every allowed continuation
	// starts with ("" when there is a choice or the grammar may end),
	// without changing the state.
	JumpForward() string
	// Rollback undoes the last n accepted tokens.
	Rollback(n int) error
}

// Codec turns text into token ids and back. It is how jump-forward
// decoding tokenizes forced text without generate depending on a
// tokenizer; a caller adapts its tokenizer (no special tokens added).
type Codec interface {
	// Encode returns the canonical ids of text.
	Encode(text string) []int32
	// Decode returns the text of ids.
	Decode(ids []int32) string
}

// MemoryInfo is the optional memory interface of a backend (an allocator
// with a buffer cache and a high-water mark, as MLX has). The loop uses it
// when Options.Memory is set or the backend implements it.
type MemoryInfo interface {
	// PeakMemory is the largest number of bytes the backend held at once.
	PeakMemory() (uint64, error)
	// ClearCache returns cached, unused buffers to the system; the loop
	// calls it between prefill chunks so their transients do not pile up.
	ClearCache() error
}

// DefaultMaxTokens is the generation limit when Options.MaxTokens is 0
// (mlx-lm's default).
const DefaultMaxTokens = 256

// DefaultPrefillChunkSize is the prefill chunk when Options.PrefillChunkSize
// is 0 (mlx-lm's prefill_step_size).
const DefaultPrefillChunkSize = 2048

// DefaultKVGroupSize is the KV quantization group when Options.KVGroupSize
// is 0 (mlx-lm's kv_group_size).
const DefaultKVGroupSize = 64

// DefaultQuantizedKVStart is mlx-lm's command-line default for the offset
// from which KV caches are quantized. Options.QuantizedKVStart is taken
// literally (0 = from the first token, generate_step's default); the CLI
// uses this value as its flag default.
const DefaultQuantizedKVStart = 5000

// Options configure one generation. The zero value is greedy decoding of
// up to DefaultMaxTokens tokens through fresh caches.
type Options struct {
	// MaxTokens caps the generated tokens: 0 means DefaultMaxTokens, a
	// negative value means no cap (until EOS, the grammar or the context).
	MaxTokens int
	// EOS ends generation when sampled; the EOS token itself is not
	// yielded (Stats.StopReason is StopEOS).
	EOS []int32
	// PrefillChunkSize is the number of prompt tokens per forward pass
	// during prefill (0: DefaultPrefillChunkSize).
	PrefillChunkSize int
	// Sampler holds the sampling and logits-processor parameters, logprobs
	// and top logprobs included.
	Sampler sampler.Params
	// Grammar, when set, masks every step to the tokens it allows.
	Grammar Grammar
	// JumpForward, with a Grammar, feeds tokens the grammar forces
	// through one multi-token forward pass instead of sampling them one
	// per step; JumpMode says which tokens count as forced. Forced tokens
	// are yielded like sampled ones, with Token.Forced set.
	JumpForward bool
	// JumpMode picks how JumpForward finds forced tokens (the zero value,
	// JumpExact, keeps step-by-step decoding's choices).
	JumpMode JumpMode
	// Codec tokenizes the forced text for JumpCanonical.
	Codec Codec

	// Caches are pre-warmed caches (from a PromptCache): their offset
	// counts as already prefilled and must be smaller than the prompt
	// (the caller guarantees they hold the prompt's first tokens). The
	// caller keeps ownership; the loop appends to them and may replace
	// entries with quantized caches in place. Nil: fresh caches that the
	// Stream owns (see Stream.TakeCaches).
	Caches []kv.Cache

	// OnPrefillDone, when set, is called once, when the caches hold exactly
	// SnapshotAt tokens of the prompt, before any further KV is written:
	// the moment to snapshot them (cloning: the loop keeps writing). The
	// prefill is split at SnapshotAt. It is not called when pre-warmed
	// caches already hold more than SnapshotAt tokens.
	OnPrefillDone func(caches []kv.Cache, tokens int)
	// SnapshotAt is where OnPrefillDone fires (0: the whole prompt, after
	// the last prompt token's forward pass).
	SnapshotAt int
	// OnPrefillProgress, when set, is called after every prefill chunk
	// with the prompt tokens processed so far and the prompt length.
	OnPrefillProgress func(done, total int)

	// KVBits quantizes the caches (4 or 8; 0: never) once their offset
	// reaches QuantizedKVStart, with KVGroupSize (0: DefaultKVGroupSize).
	KVBits, KVGroupSize, QuantizedKVStart int
	// KVConfig overrides bits and group size per layer (kv.ReadKVConfig).
	KVConfig map[int]kv.QuantSpec

	// Backend is where the loop creates its input arrays (nil:
	// tensor.Default()); it must be the model's.
	Backend tensor.Backend
	// Memory reports peak memory and clears allocator caches (nil: the
	// backend's own, when it implements MemoryInfo).
	Memory MemoryInfo
}

// JumpMode is how jump-forward decoding (Options.JumpForward) decides
// which tokens to feed without sampling them: exactly the tokens
// step-by-step decoding could not avoid, or the tokenizer's spelling of
// the text the grammar forces.
type JumpMode int

const (
	// JumpExact feeds a token without a forward pass of its own only when
	// the grammar's mask allows that token alone (and it is not an EOS
	// token): a masked argmax or categorical draw over one allowed token
	// returns it whatever the logits, so the output is the one
	// step-by-step constrained decoding gives, token for token — as far
	// as a multi-token forward pass computes what single steps do: in
	// bf16 it rounds differently, which can still tip a near-tie. Its
	// logprob under the masked distribution is exactly 0, which is what
	// it is given when Sampler.Logprobs is set; the mode is off when
	// Sampler.TopLogprobs is set (the alternatives of a forced token are
	// all -Inf, in an order only the backend's top-k knows). Sampled runs
	// split the RNG key once per sampling step, so skipping the forced
	// steps moves later draws to other keys: the same distribution, not
	// the same draws as step by step with the same seed. It needs no
	// Codec. Forced tokens often come one or a few at a time: a BPE
	// vocabulary usually offers several spellings of forced text (a key's
	// first letter, its first two, ...), and a mask with a choice of
	// spelling forces nothing.
	JumpExact JumpMode = iota
	// JumpCanonical feeds the text the grammar forces after a sampled
	// token (the Grammar must implement JumpForwarder, and Codec must be
	// set): the sampled token and the forced text are tokenized together
	// (so that the token stream stays the one the tokenizer would
	// produce) and the last of those tokens is left to sampling, since it
	// could merge with the text that follows. It saves more forward
	// passes than JumpExact, but the model may have spelled the forced
	// text with other tokens, so the output can differ from step-by-step
	// decoding. Forced tokens have NaN logprobs, and the mode is off
	// whenever logprobs are requested.
	JumpCanonical
)

// Token is one generated token.
type Token struct {
	// ID is the token id.
	ID int32
	// Index counts generated tokens from 0.
	Index int
	// Logprob is the token's log-probability (after the logits processors
	// and the grammar mask, before truncation); NaN unless asked for.
	Logprob float32
	// Top holds the most likely alternatives, when asked for.
	Top []sampler.TokenLogprob
	// Forced marks a token jump-forward fed because the grammar forced
	// it, instead of sampling it (see Options.JumpForward).
	Forced bool
}

// Stop reasons recorded in Stats.StopReason.
const (
	StopEOS       = "eos"       // an EOS token was sampled
	StopLength    = "length"    // MaxTokens were generated
	StopGrammar   = "grammar"   // the grammar terminated
	StopCancelled = "cancelled" // the context was cancelled
	StopConsumer  = "consumer"  // the caller left the loop
	StopError     = "error"     // a forward pass or the sampler failed
)

// Stats describes a finished (or abandoned) generation.
type Stats struct {
	PromptTokens    int `json:"prompt_tokens"`
	CachedTokens    int `json:"cached_tokens"`    // prompt tokens the pre-warmed caches held
	PrefillTokens   int `json:"prefill_tokens"`   // prompt tokens run through the model
	GeneratedTokens int `json:"generated_tokens"` // tokens yielded (EOS excluded)
	// PrefillMs runs from the start of the iteration to the first token
	// read back; PrefillTPS is PrefillTokens over it.
	PrefillMs  float64 `json:"prefill_ms"`
	PrefillTPS float64 `json:"prefill_tps"`
	// DecodeMs runs from the first token to the last one read back;
	// DecodeTPS is the tokens after the first over it.
	DecodeMs  float64 `json:"decode_ms"`
	DecodeTPS float64 `json:"decode_tps"`
	// PeakMemory is the backend's high-water mark in bytes (0: unknown).
	PeakMemory uint64 `json:"peak_memory"`
	// StopReason is one of the Stop constants.
	StopReason string `json:"stop_reason"`
	// Pipelined reports whether decode dispatched step n+1 before reading
	// step n (false with a grammar or history-based penalties).
	Pipelined bool `json:"pipelined"`
	// DecodeSteps counts the decode forward passes (one per sampled
	// token); with jump-forward it is smaller than GeneratedTokens.
	DecodeSteps int `json:"decode_steps"`
	// ForcedTokens counts the tokens jump-forward fed without sampling
	// them: the decode steps it saved.
	ForcedTokens int `json:"forced_tokens,omitempty"`
	// CacheTokens are exactly the tokens whose KV the caches hold, in
	// order: the key under which PromptCache.Put stores them.
	CacheTokens []int32 `json:"-"`
}

// StepRunner is implemented by backends on which a tensor op costs more
// when made alone than as part of a batch handed over at once: on
// mlxffi.Backend every op made outside Run is a hand-off to the locked
// MLX thread (several microseconds, against a fraction of one inside
// Run), and a small model's decode step makes hundreds. When the backend
// implements it, the loop makes each prefill chunk, each decode step's
// forward pass and sampling, and each read-back of a sampled token inside
// one Run. Run must run f to completion before returning, run a nested
// Run inline, and re-raise a panic inside f on the caller's goroutine.
type StepRunner interface {
	Run(f func())
}

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

// Generate validates the request and prepares a Stream; nothing runs
// until Tokens is iterated. Errors here are the caller's (bad sampling
// parameters are *sampler.ParamError, which servers map to HTTP 400).
func Generate(ctx context.Context, m Model, prompt []int32, opts *Options) (*Stream, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	vocab := m.VocabSize()
	for i, id := range prompt {
		if id < 0 || int(id) >= vocab {
			return nil, fmt.Errorf("generate: prompt token %d (position %d) is outside the vocabulary [0, %d)", id, i, vocab)
		}
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.PrefillChunkSize == 0 {
		o.PrefillChunkSize = DefaultPrefillChunkSize
	}
	if o.PrefillChunkSize < 0 {
		return nil, fmt.Errorf("generate: prefill chunk size %d", o.PrefillChunkSize)
	}
	if o.SnapshotAt == 0 {
		o.SnapshotAt = len(prompt)
	}
	if o.SnapshotAt < 0 || o.SnapshotAt > len(prompt) {
		return nil, fmt.Errorf("generate: snapshot at %d outside the prompt of %d tokens", o.SnapshotAt, len(prompt))
	}
	if o.KVGroupSize == 0 {
		o.KVGroupSize = DefaultKVGroupSize
	}
	if o.KVBits != 0 {
		q, err := kv.NewQuantizedKVCache(o.KVGroupSize, o.KVBits)
		if err != nil {
			return nil, fmt.Errorf("generate: KV quantization: %w", err)
		}
		q.Free()
	}
	if o.QuantizedKVStart < 0 {
		return nil, fmt.Errorf("generate: quantized KV start %d", o.QuantizedKVStart)
	}
	s := &Stream{ctx: ctx, m: m, prompt: slices.Clone(prompt), o: o, vocab: vocab}
	s.be = o.Backend
	if s.be == nil {
		if err := tensor.Try(func() { s.be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	s.runner, _ = s.be.(StepRunner)
	s.mem = o.Memory
	if s.mem == nil {
		s.mem, _ = s.be.(MemoryInfo)
	}
	s.plan = kv.QuantPlan{Default: kv.QuantSpec{Bits: o.KVBits, GroupSize: o.KVGroupSize}, PerLayer: o.KVConfig, Start: o.QuantizedKVStart}
	s.quant = o.KVBits != 0
	for _, spec := range o.KVConfig {
		s.quant = s.quant || spec.Bits != 0
	}
	if o.Caches != nil {
		off := -1
		for i, c := range o.Caches {
			if c == nil {
				continue
			}
			if off >= 0 && c.Offset() != off {
				return nil, fmt.Errorf("generate: pre-warmed caches disagree: layer %d holds %d tokens, an earlier one %d", i, c.Offset(), off)
			}
			off = c.Offset()
		}
		if off >= len(prompt) {
			return nil, fmt.Errorf("generate: pre-warmed caches hold %d tokens, not a strict prefix of the %d-token prompt", off, len(prompt))
		}
		s.caches = o.Caches
		s.stats.CachedTokens = max(off, 0)
	}
	smp, err := sampler.NewOn(s.be, o.Sampler, vocab)
	if err != nil {
		return nil, err
	}
	s.smp = smp
	if s.caches == nil {
		s.caches = m.MakeCaches()
		s.owned = true
	}
	s.stats.PromptTokens = len(prompt)
	s.stats.PrefillTokens = len(prompt) - s.stats.CachedTokens
	return s, nil
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
// jump-forward decoding is on and possible for this request.
func (s *Stream) jumpForwarder() JumpForwarder {
	p := s.o.Sampler
	if !s.o.JumpForward || s.o.JumpMode != JumpCanonical || s.o.Codec == nil || p.Logprobs || p.TopLogprobs > 0 {
		return nil
	}
	jf, _ := s.o.Grammar.(JumpForwarder)
	return jf
}

// exactJump reports whether exact jump-forward decoding is on and
// possible for this request (see JumpExact).
func (s *Stream) exactJump() bool {
	return s.o.JumpForward && s.o.JumpMode == JumpExact && s.o.Grammar != nil && s.o.Sampler.TopLogprobs == 0
}

// forcedLogprob is the logprob reported for a forced token: exactly 0 in
// exact mode when logprobs are asked for (the masked distribution has one
// allowed token), NaN otherwise.
func (s *Stream) forcedLogprob(exact bool) float32 {
	if exact && s.o.Sampler.Logprobs {
		return 0
	}
	return float32(math.NaN())
}

// forcedRun moves the grammar over the tokens its mask forces one at a
// time — while the mask allows a single token that is not an EOS token —
// and returns them; at most room tokens (-1: no cap). ready reports that
// mask holds the allowed tokens of the grammar's current state, so the
// next dispatch need not fill it again. A forced token that ends the
// grammar ends the run (the caller sees IsTerminated).
func (s *Stream) forcedRun(mask []int32, room int) (out []int32, ready bool, err error) {
	g := s.o.Grammar
	for !g.IsTerminated() {
		if room >= 0 && len(out) >= room {
			return out, false, nil
		}
		if err := g.FillNextTokenBitmask(mask); err != nil {
			return nil, false, fmt.Errorf("generate: grammar mask: %w", err)
		}
		id, ok := onlyAllowed(mask, s.vocab)
		if !ok || slices.Contains(s.o.EOS, id) {
			return out, true, nil
		}
		if !g.AcceptToken(int(id)) {
			return nil, false, fmt.Errorf("generate: the grammar rejected token %d, the only one its mask allowed", id)
		}
		out = append(out, id)
	}
	return out, false, nil
}

// onlyAllowed returns the token a mask allows when it allows exactly one
// inside the vocabulary.
func onlyAllowed(mask []int32, vocab int) (int32, bool) {
	id := int32(-1)
	for w, word := range mask {
		u := uint32(word)
		if w == len(mask)-1 && vocab%32 != 0 {
			u &= 1<<(vocab%32) - 1
		}
		if u == 0 {
			continue
		}
		if id >= 0 || u&(u-1) != 0 {
			return 0, false
		}
		id = int32(w*32 + bits.TrailingZeros32(u))
	}
	return id, id >= 0
}

// leading returns the tokens of the text the grammar forces before
// anything is sampled (a JSON object's opening brace and first key), with
// the grammar moved onto them, less the last token, which may merge with
// what follows; nil when nothing is forced or the grammar refuses the
// encoding. room caps the tokens (-1: none).
func (s *Stream) leading(jf JumpForwarder, room int) ([]int32, error) {
	text := jf.JumpForward()
	if text == "" {
		return nil, nil
	}
	c := s.o.Codec
	ids := c.Encode(text)
	if len(ids) < 2 || c.Decode(ids) != text {
		return nil, nil
	}
	ids = ids[:len(ids)-1]
	if room >= 0 && len(ids) > room {
		ids = ids[:room]
	}
	for i, t := range ids {
		if t < 0 || int(t) >= s.vocab || !s.o.Grammar.AcceptToken(int(t)) {
			if jf.Rollback(i) != nil {
				return nil, errors.New("generate: the grammar could not undo a jump-forward")
			}
			return nil, nil
		}
	}
	return ids, nil
}

// forced returns the tokens to feed in place of the sampled (and already
// accepted) id when the grammar forces text after it, with the grammar
// moved onto them; nil leaves the step as it was. The sampled token and
// the forced text are encoded together, since the tokenizer may merge
// across their boundary (a sampled `"` before a forced `name":` becomes
// `"name`, `":` when encoded whole); the last token of that encoding is
// dropped, because it may merge with the text still to be sampled, and it
// costs one step to sample it instead. room caps the tokens (-1: none).
// Any disagreement (the sampled token does not round-trip through the
// codec, the encoding does not spell the text, the grammar refuses a
// token) falls back to ordinary decoding, which is always valid.
func (s *Stream) forced(jf JumpForwarder, id int32, room int) ([]int32, error) {
	text := jf.JumpForward()
	if text == "" {
		return nil, nil
	}
	c := s.o.Codec
	one := []int32{id}
	pre := c.Decode(one)
	if !slices.Equal(c.Encode(pre), one) {
		return nil, nil
	}
	ids := c.Encode(pre + text)
	if len(ids) < 2 || c.Decode(ids) != pre+text {
		return nil, nil
	}
	ids = ids[:len(ids)-1]
	if room >= 0 && len(ids) > room {
		ids = ids[:room]
	}
	if len(ids) == 0 || slices.Equal(ids, one) {
		return nil, nil
	}
	for _, t := range ids {
		if t < 0 || int(t) >= s.vocab {
			return nil, nil
		}
	}
	g := s.o.Grammar
	if jf.Rollback(1) != nil {
		return nil, nil
	}
	for i, t := range ids {
		if !g.AcceptToken(int(t)) {
			if jf.Rollback(i) != nil || !g.AcceptToken(int(id)) {
				return nil, errors.New("generate: the grammar could not undo a jump-forward")
			}
			return nil, nil
		}
	}
	return ids, nil
}

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

// Wrap adapts a model whose Forward takes a third, optional argument (as
// model.Model's does: *model.ForwardOptions) to Model, passing nil for it.
// vocab is the logits width (model.Model's Info().Vocab). The type
// parameter is inferred from m's Forward method.
func Wrap[O any](m interface {
	Forward(ids *tensor.Array, caches []kv.Cache, opts *O) (*tensor.Array, error)
	Logits(hidden *tensor.Array) (*tensor.Array, error)
	MakeCaches() []kv.Cache
}, vocab int) Model {
	return &wrapped[O]{fwd: m.Forward, logits: m.Logits, mk: m.MakeCaches, vocab: vocab}
}

type wrapped[O any] struct {
	fwd    func(*tensor.Array, []kv.Cache, *O) (*tensor.Array, error)
	logits func(*tensor.Array) (*tensor.Array, error)
	mk     func() []kv.Cache
	vocab  int
}

func (w *wrapped[O]) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	return w.fwd(ids, caches, nil)
}
func (w *wrapped[O]) Logits(h *tensor.Array) (*tensor.Array, error) { return w.logits(h) }
func (w *wrapped[O]) MakeCaches() []kv.Cache                        { return w.mk() }
func (w *wrapped[O]) VocabSize() int                                { return w.vocab }
