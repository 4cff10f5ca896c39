package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// Prefixes are the name prefixes under which checkpoints store the text
// model's weights: HF's plain models ("model."), multimodal wrappers
// ("model.language_model.", "language_model.model."), and bare names.
var Prefixes = []string{"model.", "model.language_model.", "language_model.model.", "language_model.", ""}

// loadError carries a checkpoint problem out of architecture constructors,
// which read like mlx-lm's (one weight per line, no error plumbing); Load
// recovers it into an ordinary error.
type loadError struct{ err error }

// Weights hands out a checkpoint's tensors to an architecture's
// constructor. Names are relative to the text model ("layers.0.mlp.up_proj");
// the prefix the checkpoint uses is found once at open. Every array it
// hands out (and every array registered with Own) is freed by Free, so an
// architecture does not track its weights' lifetimes.
//
// Methods panic with an internal error value on a missing tensor, wrong
// shape or inconsistent quantization; Load turns it into an error naming
// the tensor and file. Use them only inside an Arch.New.
type Weights struct {
	set    *safetensors.Set
	be     tensor.Backend
	copy   bool
	quant  *QuantConfig
	prefix string
	owned  []*tensor.Array
	used   map[string]bool
	// cast, when valid, is the float type every float tensor is converted to.
	cast tensor.DType
	// wrap, when set, stands in for the layers handed out (LoadOptions.Wrap).
	wrap Wrapper
	// stream, when set, keeps routed experts on disk (LoadOptions.Experts).
	stream *expertStore
}

// NewWeights wraps an open checkpoint. be nil means the default backend;
// copy copies tensors into backend memory instead of borrowing the mapping.
func NewWeights(set *safetensors.Set, quant *QuantConfig, be tensor.Backend, copy bool) *Weights {
	if be == nil {
		be = tensor.Default()
	}
	w := &Weights{set: set, be: be, copy: copy, quant: quant, used: map[string]bool{}}
	for _, p := range Prefixes {
		if set.Has(p+"embed_tokens.weight") || set.Has(p+"embed_tokens.scales") {
			w.prefix = p
			break
		}
	}
	return w
}

// Backend is the backend weights are loaded onto.
func (w *Weights) Backend() tensor.Backend { return w.be }

// Prefix is the detected name prefix of the text model ("model.").
func (w *Weights) Prefix() string { return w.prefix }

// Quant is the checkpoint's quantization config (nil when not quantized).
func (w *Weights) Quant() *QuantConfig { return w.quant }

// Set is the underlying checkpoint.
func (w *Weights) Set() *safetensors.Set { return w.set }

// fail aborts the constructor with a checkpoint error.
func fail(err error) { panic(loadError{err}) }

func (w *Weights) failf(name string, format string, args ...any) {
	file := w.set.Dir()
	if f, err := w.set.File(name); err == nil {
		file = f.Path()
	}
	fail(fmt.Errorf("%w: %s: tensor %q: %s", ErrCheckpoint, file, name, fmt.Sprintf(format, args...)))
}

// Resolve returns the stored name of a model-relative tensor name: under
// the detected prefix, else at the root ("lm_head.weight"), else under any
// other known prefix. ok is false when no variant is stored.
func (w *Weights) Resolve(name string) (string, bool) {
	if w.set.Has(w.prefix + name) {
		return w.prefix + name, true
	}
	for _, p := range Prefixes {
		if w.set.Has(p + name) {
			return p + name, true
		}
	}
	return w.prefix + name, false
}

// Has reports whether the model-relative tensor is stored.
func (w *Weights) Has(name string) bool { _, ok := w.Resolve(name); return ok }

// Own registers an array made at load time (a stacked or derived weight)
// to be freed with the weights.
func (w *Weights) Own(a *tensor.Array) *tensor.Array {
	tensor.Detach(a)
	w.owned = append(w.owned, a)
	return a
}

// Tensor loads a model-relative tensor, checking its shape when shape is
// given (-1 matches any size).
func (w *Weights) Tensor(name string, shape ...int) *tensor.Array {
	full, ok := w.Resolve(name)
	if !ok {
		fail(fmt.Errorf("%w: %s: missing tensor %q (also looked for prefixes %q)", ErrCheckpoint, w.set.Dir(), full, Prefixes))
	}
	return w.load(full, shape, tensor.Invalid)
}

// load reads a stored tensor by its full name, checking shape and, unless
// Invalid, dtype.
func (w *Weights) load(full string, shape []int, dt tensor.DType) *tensor.Array {
	info, err := w.set.Info(full)
	if err != nil {
		fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
	}
	if info.DType == tensor.Invalid {
		w.failf(full, "unsupported dtype %s", info.RawDType)
	}
	if shape != nil && !shapeMatches(info.Shape, shape) {
		w.failf(full, "shape %v, want %v", info.Shape, shape)
	}
	if dt != tensor.Invalid && info.DType != dt {
		w.failf(full, "dtype %s, want %s", info.DType, dt)
	}
	a, err := w.set.Array(full, w.be, w.copy)
	if err != nil {
		var se *safetensors.Error
		if errors.As(err, &se) {
			fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
		}
		w.failf(full, "%v", err)
	}
	w.used[full] = true
	if w.cast.Valid() && a.DType().IsFloat() && a.DType() != w.cast {
		c := tensor.AsType(a, w.cast)
		tensor.Detach(c)
		a.Free()
		a = c
	}
	return w.Own(a)
}

func shapeMatches(got, want []int) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if want[i] >= 0 && got[i] != want[i] {
			return false
		}
	}
	return true
}

// Unused lists stored tensors no constructor asked for (a check for
// architectures that silently ignore weights).
func (w *Weights) Unused() []string {
	var out []string
	for _, n := range w.set.Names() {
		if !w.used[n] {
			out = append(out, n)
		}
	}
	return out
}

// Free frees every array loaded or registered.
func (w *Weights) Free() {
	if w.stream != nil {
		w.stream.close()
	}
	tensor.Free(w.owned...)
	w.owned = nil
}

// quantized reports whether the module at the model-relative path base is
// stored quantized and with which spec, checking the config agrees.
func (w *Weights) quantized(base string) (full string, spec tensor.QuantSpec, q bool) {
	full, ok := w.Resolve(base + ".scales")
	if !ok {
		wfull, _ := w.Resolve(base + ".weight")
		mod := wfull[:len(wfull)-len(".weight")]
		if w.quant != nil {
			if s, ok := w.quant.Modules[mod]; ok && s != nil {
				w.failf(wfull, "quantization config lists module %q as quantized but it has no scales", mod)
			}
		}
		return mod, tensor.QuantSpec{}, false
	}
	mod := full[:len(full)-len(".scales")]
	if w.quant == nil {
		w.failf(full, "module %q is quantized but config.json has no quantization section", mod)
	}
	spec, allowed := w.quant.For(mod)
	if !allowed {
		w.failf(full, "module %q is quantized but config.json's quantization marks it false", mod)
	}
	return mod, spec, true
}

// Packed loads the affine-quantized triple of a module stored with leading
// dims lead (experts), out rows and in columns, checking shapes against the
// spec. Errors name the config's bits and group size, since a wrong
// per-module override is the usual cause.
func (w *Weights) packed(mod string, spec tensor.QuantSpec, lead []int, out, in int) (wq, scales, biases *tensor.Array) {
	if in%spec.GroupSize != 0 || (in*spec.Bits)%32 != 0 {
		w.failf(mod+".weight", "input dim %d is not a multiple of group size %d (inconsistent quantization config)", in, spec.GroupSize)
	}
	ws := append(slices.Clone(lead), out, in*spec.Bits/32)
	ss := append(slices.Clone(lead), out, in/spec.GroupSize)
	check := func(name string, want []int, dt tensor.DType) *tensor.Array {
		info, err := w.set.Info(name)
		if err != nil {
			fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
		}
		if !shapeMatches(info.Shape, want) {
			w.failf(name, "shape %v, want %v for bits=%d group_size=%d (inconsistent quantization config)", info.Shape, want, spec.Bits, spec.GroupSize)
		}
		return w.load(name, want, dt)
	}
	wq = check(mod+".weight", ws, tensor.Uint32)
	scales = check(mod+".scales", ss, tensor.Invalid)
	biases = check(mod+".biases", ss, scales.DType())
	if !scales.DType().IsFloat() {
		w.failf(mod+".scales", "dtype %s, want a float type", scales.DType())
	}
	return wq, scales, biases
}

// modulePath is the full module path of the model-relative name as the
// checkpoint stores it (its ".scales" or ".weight" resolved).
func (w *Weights) modulePath(name string) string {
	if full, ok := w.Resolve(name + ".scales"); ok {
		return full[:len(full)-len(".scales")]
	}
	full, _ := w.Resolve(name + ".weight")
	return full[:len(full)-len(".weight")]
}

// BankPath is where MLX checkpoints keep the stacked expert banks of the
// block at base (a full module path): "<mlp>.switch_mlp." for Qwen-style
// blocks, "<layer>.experts.switch_glu." for Gemma 4's experts, which sit
// beside the MLP. The bank's projection name follows ("gate_proj").
func BankPath(base string) string {
	if strings.HasSuffix(base, ".mlp") {
		return base + ".switch_mlp."
	}
	return base + ".experts.switch_glu."
}

// wrapBank hands a bank to the Wrapper, if any.
func (w *Weights) wrapBank(m Module, b ExpertBank) ExpertBank {
	if w.wrap == nil {
		return b
	}
	return w.wrap.Experts(m, b)
}

// wrapBanks hands the banks of a block whose module path is base (full,
// "model.layers.0.mlp"), built from the stored tensor src (per-expert or
// fused), to the Wrapper under the paths MLX checkpoints stack them at
// (BankPath).
func (w *Weights) wrapBanks(base, src string, g *SwitchGLU) {
	for _, b := range []struct {
		proj string
		bank *ExpertBank
	}{{"gate_proj", &g.Gate}, {"up_proj", &g.Up}, {"down_proj", &g.Down}} {
		*b.bank = w.wrapBank(Module{Path: BankPath(base) + b.proj, Source: src}, *b.bank)
	}
}
