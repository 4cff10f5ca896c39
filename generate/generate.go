package generate

import (
	"context"
	"errors"
	"fmt"

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

// OutputForwarder is a Model whose forward pass can return some positions'
// hidden states alone, skipping the work its last layer would do for the
// others (their keys and values are still written): what the loop uses
// where it samples from few positions of a long pass, as at a prompt's
// end. Wrap's models are OutputForwarders.
type OutputForwarder interface {
	// ForwardOutputs is Forward returning the hidden states [B, len(pos),
	// D] of positions pos (strictly increasing indices along T) only.
	ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error)
}

// ForwardOutputs runs ids through m and returns the hidden states of
// positions pos (strictly increasing indices along T): through m's
// ForwardOutputs when m is an OutputForwarder, else selected from every
// position's (a plain Forward when pos is every position). Wrappers of a
// Model implement OutputForwarder with it.
func ForwardOutputs(m Model, ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	if len(pos) == ids.Dim(1) {
		return m.Forward(ids, caches)
	}
	if of, ok := m.(OutputForwarder); ok {
		return of.ForwardOutputs(ids, caches, pos)
	}
	h, err := m.Forward(ids, caches)
	if err != nil {
		return nil, err
	}
	return selectPositions(h, pos), nil
}

// selectPositions returns positions pos of h [B, T, D], consuming h (h
// itself when it holds len(pos) positions: every position in order, or a
// model's output that already holds pos alone).
func selectPositions(h *tensor.Array, pos []int32) *tensor.Array {
	if len(pos) == h.Dim(1) {
		return h // already the positions asked for
	}
	out := tensor.Take(h, tensor.FromInt32On(h.Backend(), pos, []int{len(pos)}), 1)
	h.Free()
	return out
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
// is 0. mlx-lm's prefill_step_size is 2048; on the CPU backend 512 prefills
// a 2048-token prompt as fast (92.7–105.5 tok/s over three runs against
// 83.8–93.4 over five for one 2048 chunk, 1B 4-bit, two threads) and peaks
// about 0.7 GB lower in RSS (1.18 GB against 1.85–1.95: a chunk's float32
// activations and the kernels' scratch scale with it), so 512 (llama.cpp's
// micro-batch) is the default. Chunk
// sizes do not change results (every position's logits are bit-identical
// at any chunking). Not measured on MLX.
const DefaultPrefillChunkSize = 512

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

	// Adapters names the adapter set (LoRA adapters, in order) a batch row
	// runs with, on a model that implements RowForwarder; nil runs the
	// base model. Generate ignores it: a lone sequence runs the model it
	// is given (pass the adapted variant).
	Adapters []string
	// CacheNamespace keys a batch row's share of the pool's prefix cache:
	// rows share cached blocks only within one namespace. Rows whose keys
	// and values differ for the same tokens (other adapter sets) must use
	// different ones ("" is the base model's).
	CacheNamespace string

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
	// KVQuant, when set, converts the caches to TurboQuant (full-attention
	// and sliding-window layers) once their offset reaches
	// QuantizedKVStart; it excludes KVBits and KVConfig.
	KVQuant *kv.TurboSpec

	// Speculation, when set with a draft source, turns on speculative
	// decoding (see Speculation).
	Speculation *Speculation

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
	// KVBytes is the memory the caches hold at the end (capacity
	// included), whatever their scheme.
	KVBytes int `json:"kv_bytes"`
	// CacheTokens are exactly the tokens whose KV the caches hold, in
	// order: the key under which PromptCache.Put stores them.
	CacheTokens []int32 `json:"-"`
	// Speculation holds speculative decoding's statistics when it was on
	// (DecodeSteps then counts the target's forward passes).
	Speculation *SpecStats `json:"speculation,omitempty"`
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

// Generate validates the request and prepares a Stream; nothing runs
// until Tokens is iterated. Errors here are the caller's (bad sampling
// parameters are *sampler.ParamError, which servers map to HTTP 400).
func Generate(ctx context.Context, m Model, prompt []int32, opts *Options) (*Stream, error) {
	r, err := prepare(m, prompt, opts, nil)
	if err != nil {
		return nil, err
	}
	s := &Stream{ctx: ctx, m: m, chunk: r.o.PrefillChunkSize, be: r.be, mem: r.mem, plan: r.plan, quant: r.quant}
	s.runner, _ = s.be.(StepRunner)
	s.q = newSeq(prompt, r.o, m.VocabSize(), r.smp, r.cached)
	s.caches = r.o.Caches
	if s.caches == nil {
		s.caches = m.MakeCaches()
		s.owned = true
	}
	return s, nil
}

// prepared is a validated request: its options with the defaults filled
// in, backend, memory interface, KV quantization plan, sampler, and how
// many prompt tokens pre-warmed caches hold.
type prepared struct {
	o      Options
	be     tensor.Backend
	mem    MemoryInfo
	plan   kv.QuantPlan
	quant  bool
	smp    *sampler.Sampler
	cached int
}

// prepare validates a request (Generate's, or a batch row's) and makes
// its sampler. be, when not nil, is the backend to run on whatever
// Options.Backend says (a batch's).
func prepare(m Model, prompt []int32, opts *Options, be tensor.Backend) (*prepared, error) {
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
	if o.KVQuant != nil {
		if o.KVBits != 0 || o.KVConfig != nil {
			return nil, errors.New("generate: TurboQuant KV (KVQuant) excludes KVBits and KVConfig")
		}
		t, err := kv.NewTurboQuantKVCache(*o.KVQuant)
		if err != nil {
			return nil, fmt.Errorf("generate: KV quantization: %w", err)
		}
		t.Free()
	}
	if o.QuantizedKVStart < 0 {
		return nil, fmt.Errorf("generate: quantized KV start %d", o.QuantizedKVStart)
	}
	if err := checkSpec(&o, m); err != nil {
		return nil, err
	}
	r := &prepared{be: be}
	if r.be == nil {
		r.be = o.Backend
	}
	if r.be == nil {
		if err := tensor.Try(func() { r.be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	r.mem = o.Memory
	if r.mem == nil {
		r.mem, _ = r.be.(MemoryInfo)
	}
	r.plan = kv.QuantPlan{Default: kv.QuantSpec{Bits: o.KVBits, GroupSize: o.KVGroupSize}, PerLayer: o.KVConfig,
		Start: o.QuantizedKVStart, Turbo: o.KVQuant}
	r.quant = r.plan.Quantizes()
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
		r.cached = max(off, 0)
	}
	smp, err := sampler.NewOn(r.be, o.Sampler, vocab)
	if err != nil {
		return nil, err
	}
	r.smp = smp
	r.o = o
	return r, nil
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

// ForwardOutputs implements OutputForwarder: the options ask the model for
// positions pos alone when they have a SetOutputs method (as
// *model.ForwardOptions does); otherwise, or when the model returns every
// position anyway, the positions are selected from its output.
func (w *wrapped[O]) ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	var o O
	var opts *O
	if set, ok := any(&o).(interface{ SetOutputs([]int32) }); ok {
		set.SetOutputs(pos)
		opts = &o
	}
	h, err := w.fwd(ids, caches, opts)
	if err != nil {
		return nil, err
	}
	return selectPositions(h, pos), nil
}

func (w *wrapped[O]) Logits(h *tensor.Array) (*tensor.Array, error) { return w.logits(h) }
func (w *wrapped[O]) MakeCaches() []kv.Cache                        { return w.mk() }
func (w *wrapped[O]) VocabSize() int                                { return w.vocab }
