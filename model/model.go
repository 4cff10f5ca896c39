package model

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// Info describes a loaded model to its users (the generation loop, the
// server): what it needs to size buffers and stop.
type Info struct {
	ModelType string
	Vocab     int   // rows of the logits
	Hidden    int   // width of the hidden states Forward returns
	Layers    int   // decoder layers
	EOS       []int // end-of-sequence ids
	// DType is the activation dtype (the embedding's).
	DType tensor.DType
	// SlidingWindow is the smallest attention window of any layer (0: all
	// layers attend to everything); prefill chunks should not exceed it
	// when exactness against full-attention references matters.
	SlidingWindow int
}

// ForwardOptions carries optional inputs of a forward pass.
type ForwardOptions struct {
	// Embeddings [B, T, D], when set, replaces token embeddings where
	// EmbedMask is true (or everywhere when EmbedMask is nil): the hook for
	// multimodal inputs, whose image features arrive precomputed.
	Embeddings *tensor.Array
	// EmbedMask is a bool [B, T] array selecting the positions taken from
	// Embeddings.
	EmbedMask *tensor.Array
	// Blocks, when set (one id per position of the pass, B = 1), lets
	// positions sharing an id ≥ 0 attend to one another in both
	// directions on top of the causal mask: Gemma 4's image blocks on
	// use_bidirectional_attention "vision" models (its sliding layers;
	// full-attention layers stay causal, as in transformers). -1 marks
	// positions outside any block; a block must lie whole in one pass.
	// Architectures without bidirectional blocks ignore it.
	Blocks []int32
	// Outputs, when set, are the positions of the pass (indices along T,
	// strictly increasing) whose hidden states the caller uses: Forward
	// returns [B, len(Outputs), D] for them alone. Every layer still reads
	// and writes the keys and values of every position; the last layer's
	// feed-forward runs for these positions only (where the architecture
	// supports it; others compute every position and select at the end), so
	// a prefill that wants one position's logits skips that work for the
	// rest. The selected rows are the same values a full pass gives them.
	Outputs []int32
}

// SetOutputs sets Outputs: the hook generate.Wrap uses to ask a model for
// some positions' hidden states only.
func (o *ForwardOptions) SetOutputs(pos []int32) { o.Outputs = pos }

// outputRows returns opts.Outputs as an index array on be, or nil when
// every position is wanted (no options, no Outputs); positions that are
// not strictly increasing within [0, t) are an argument error.
func outputRows(opts *ForwardOptions, t int, be tensor.Backend) *tensor.Array {
	if opts == nil || opts.Outputs == nil {
		return nil
	}
	for i, p := range opts.Outputs {
		if p < 0 || int(p) >= t || i > 0 && p <= opts.Outputs[i-1] {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: outputs %v are not increasing positions of a %d-token pass", tensor.ErrArgument, opts.Outputs, t)})
		}
	}
	return tensor.FromInt32On(be, opts.Outputs, []int{len(opts.Outputs)})
}

// lastRows is the positions layer i of n runs its feed-forward for: out
// (outputRows) for the last layer, every position (nil) before it. Every
// architecture has a layer (their configs refuse none), so the last
// layer's selection is the pass's.
func lastRows(i, n int, out *tensor.Array) *tensor.Array {
	if i == n-1 {
		return out
	}
	return nil
}

// takeRows returns the positions idx of x [B, T, D] (x itself when idx is
// nil: every position).
func takeRows(x, idx *tensor.Array) *tensor.Array {
	if idx == nil {
		return x
	}
	return tensor.Take(x, idx, 1)
}

// Architecture is what an architecture file implements. Its methods
// compute with the tensor API and may panic with a *tensor.Error; the
// Model wrapper returned by Load recovers and frees nothing of the
// caller's. Weights belong to the Weights object the constructor was
// given and are freed with it.
type Architecture interface {
	// Forward runs the decoder over ids [B, T] at the caches' offsets
	// (MakeCaches' caches, one per layer, nil entries for layers without
	// one) and returns the final-normed hidden states [B, T, D].
	Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array
	// Logits projects hidden states [B, T, D] to [B, T, V].
	Logits(hidden *tensor.Array) *tensor.Array
	// MakeCaches returns one cache per layer (nil for layers that share
	// another layer's cache).
	MakeCaches() []kv.Cache
	// Info describes the model.
	Info() Info
}

// Model is a loaded model, the API the generation loop consumes. Its
// methods never panic: failures come back as errors.
type Model interface {
	// Forward runs the model over ids [B, T] (int32) with the caches and
	// returns hidden states [B, T, D] the caller owns.
	Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) (*tensor.Array, error)
	// Logits maps hidden states to logits [B, T, V] the caller owns.
	Logits(hidden *tensor.Array) (*tensor.Array, error)
	// MakeCaches returns fresh caches, one per layer; the caller frees them.
	MakeCaches() []kv.Cache
	// Info describes the model.
	Info() Info
	// Close frees the weights and closes the checkpoint.
	Close() error
}

// Arch registers an architecture.
type Arch struct {
	// Name is the architecture's display name ("llama").
	Name string
	// ModelTypes are config.json model_type values it handles.
	ModelTypes []string
	// Architectures are config.json architectures entries it handles.
	Architectures []string
	// New builds the model from the config and weights. It may fail by
	// returning an error or through the Weights methods' panics.
	New func(cfg *Config, w *Weights) (Architecture, error)
}

var (
	regMu    sync.RWMutex
	registry []*Arch
)

// Register makes an architecture loadable; architecture files call it from
// init. It panics when the name, or a model_type or architectures entry,
// is already registered: Lookup would otherwise pick whichever init ran
// first, silently.
func Register(a Arch) {
	regMu.Lock()
	defer regMu.Unlock()
	for _, r := range registry {
		if r.Name == a.Name {
			panic(fmt.Sprintf("model: architecture %q registered twice", a.Name))
		}
		for _, t := range a.ModelTypes {
			if slices.Contains(r.ModelTypes, t) {
				panic(fmt.Sprintf("model: architecture %q: model_type %q already registered by %q", a.Name, t, r.Name))
			}
		}
		for _, n := range a.Architectures {
			if slices.Contains(r.Architectures, n) {
				panic(fmt.Sprintf("model: architecture %q: architectures entry %q already registered by %q", a.Name, n, r.Name))
			}
		}
	}
	registry = append(registry, &a)
}

// Supported lists the registered model_type values, sorted.
func Supported() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	var out []string
	for _, a := range registry {
		out = append(out, a.ModelTypes...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Lookup finds the architecture for a config: by model_type first, then by
// the architectures list.
func Lookup(cfg *Config) (*Arch, error) {
	regMu.RLock()
	defer regMu.RUnlock()
	for _, a := range registry {
		if cfg.ModelType != "" && slices.Contains(a.ModelTypes, cfg.ModelType) {
			return a, nil
		}
	}
	for _, a := range registry {
		for _, name := range cfg.Architectures {
			if slices.Contains(a.Architectures, name) {
				return a, nil
			}
		}
	}
	what := fmt.Sprintf("model_type %q", cfg.ModelType)
	if len(cfg.Architectures) > 0 {
		what += fmt.Sprintf(" (architectures %s)", strings.Join(cfg.Architectures, ", "))
	}
	var types []string
	for _, a := range registry {
		types = append(types, a.ModelTypes...)
	}
	sort.Strings(types)
	return nil, fmt.Errorf("%w: %s; supported model types: %s", ErrUnsupported, what, strings.Join(slices.Compact(types), ", "))
}

// LoadOptions tunes Load.
type LoadOptions struct {
	// Backend computes the model (nil: tensor.Default()).
	Backend tensor.Backend
	// Copy copies weights into backend memory (huge pages on the CPU
	// backend) instead of borrowing the read-only file mapping.
	Copy bool
	// DType, when valid, converts every floating-point tensor to this
	// type at load (a bf16 checkpoint computed in float32, as
	// calibration and parity checks want). Quantized weights stay packed;
	// their scales and biases are converted.
	DType tensor.DType
	// Wrap, when set, is handed every layer as it is loaded and may stand
	// in for it (see Wrapper).
	Wrap Wrapper
	// Experts, when set, keeps MoE experts on disk and streams the routed
	// ones through a bounded cache (see ExpertStreaming).
	Experts *ExpertStreaming
}

// Load opens the model folder dir: config.json, then the safetensors
// checkpoint (headers only; tensor data is mapped and read on use unless
// opts.Copy). Any checkpoint problem is an error naming the file and tensor.
func Load(dir string, opts *LoadOptions) (Model, error) {
	if opts == nil {
		opts = &LoadOptions{}
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	arch, err := Lookup(cfg)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w: %w", ErrCheckpoint, err)
	}
	m, err := Build(arch, cfg, set, opts)
	if err != nil {
		_ = set.Close()
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	m.closeSet = true
	return m, nil
}

// Build constructs a model from an open checkpoint (which the caller
// closes after the model's Close, unless Load opened it).
func Build(arch *Arch, cfg *Config, set *safetensors.Set, opts *LoadOptions) (m *Loaded, err error) {
	if opts == nil {
		opts = &LoadOptions{}
	}
	var w *Weights
	defer func() {
		if r := recover(); r != nil {
			if le, ok := r.(loadError); ok {
				err = le.err
			} else {
				err = tensor.Try(func() { panic(r) })
			}
		}
		if err != nil && w != nil {
			w.Free()
			m = nil
		}
	}()
	if e := tensor.Try(func() { w = NewWeights(set, cfg.Quant, opts.Backend, opts.Copy) }); e != nil {
		return nil, e
	}
	w.cast, w.wrap = opts.DType, opts.Wrap
	if opts.Experts != nil {
		w.stream = newExpertStore(opts.Experts, w.be, w.cast)
	}
	a, err := arch.New(cfg, w)
	if err != nil {
		return nil, err
	}
	return &Loaded{arch: a, w: w, set: set, info: a.Info()}, nil
}

// Loaded is the Model Load returns: an Architecture with its weights and
// checkpoint, behind methods that turn panics into errors.
type Loaded struct {
	arch     Architecture
	w        *Weights
	set      *safetensors.Set
	info     Info
	closeSet bool
	closed   bool
}

// Arch returns the underlying architecture (for tests and tools that want
// the panicking API).
func (m *Loaded) Arch() Architecture { return m.arch }

// Forward implements Model.
func (m *Loaded) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) (out *tensor.Array, err error) {
	if m.closed {
		return nil, errors.New("model: Forward on a closed model")
	}
	err = tensor.Try(func() {
		if ids.NDim() != 2 {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: ids %v (want [B, T])", tensor.ErrShape, ids.Shape())})
		}
		if caches != nil && len(caches) != m.info.Layers {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: %d caches for %d layers", tensor.ErrArgument, len(caches), m.info.Layers)})
		}
		out = m.arch.Forward(ids, caches, opts)
	})
	return out, err
}

// Logits implements Model.
func (m *Loaded) Logits(hidden *tensor.Array) (out *tensor.Array, err error) {
	if m.closed {
		return nil, errors.New("model: Logits on a closed model")
	}
	err = tensor.Try(func() { out = m.arch.Logits(hidden) })
	return out, err
}

// Backend is the backend the weights live on: inputs to Forward are made
// there.
func (m *Loaded) Backend() tensor.Backend { return m.w.Backend() }

// Unused lists the stored tensors no layer asked for (a check that an
// architecture, or a converter's output, leaves no weight aside).
func (m *Loaded) Unused() []string { return m.w.Unused() }

// MakeCaches implements Model.
func (m *Loaded) MakeCaches() []kv.Cache { return m.arch.MakeCaches() }

// Info implements Model.
func (m *Loaded) Info() Info { return m.info }

// Close frees the weights (and closes the checkpoint when Load opened it).
func (m *Loaded) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	m.w.Free()
	if m.closeSet {
		return m.set.Close()
	}
	return nil
}

// FreeCaches frees every non-nil cache.
func FreeCaches(caches []kv.Cache) {
	for _, c := range caches {
		if c != nil {
			c.Free()
		}
	}
}
