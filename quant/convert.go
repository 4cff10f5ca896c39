package quant

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// ConvertOptions configures Convert.
type ConvertOptions struct {
	// Quantize turns on affine quantization with Spec (a zero field takes
	// the default: 4 bits, groups of 64); off, Convert only restacks and
	// recasts.
	Quantize bool
	Spec     tensor.QuantSpec
	// DType, when valid, is the float type of unquantized tensors and of
	// scales and biases (default: each tensor's own).
	DType tensor.DType
	// Overrides sets per-module quantization: the first rule whose Match
	// is a suffix of the module path ("lm_head", "mlp.gate") applies; a
	// nil Spec keeps the module in floating point.
	Overrides []Override
	// Backend computes the quantization (nil: the default backend).
	Backend tensor.Backend
	// Method picks how weights are rounded: "" or "rtn" rounds each group
	// to its min–max grid, byte for byte what mlx-lm's convert writes;
	// "gptq" runs the float model over Calibration first and chooses the
	// codes of every dense layer (and a tied head) to minimise the error
	// of its outputs on those inputs (GPTQ), in the same format; each
	// expert of a bank against the rows routed to it. Embedding tables,
	// and matrices the calibration reaches on fewer rows than they have
	// inputs (rarely routed experts), are rounded as with "rtn".
	Method string
	// Calibration is the token sequences "gptq" runs the model over
	// (SampleSequences draws them from the model when no text is at hand).
	Calibration [][]int32
	// GPTQ tunes the "gptq" method.
	GPTQ GPTQOptions
}

// Quantization methods for ConvertOptions.Method.
const (
	MethodRTN  = "rtn"
	MethodGPTQ = "gptq"
)

// Override is one per-module quantization rule for Convert.
type Override struct {
	Match string
	Spec  *tensor.QuantSpec
}

// expertRE matches HF's per-expert weights, which MLX checkpoints stack.
var expertRE = regexp.MustCompile(`^(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)

// Convert writes an MLX checkpoint of the HF checkpoint in src to dst:
// per-expert weights stacked into switch_mlp banks (as mlx-lm does),
// linear and embedding weights affine-quantized where their input dim is
// a multiple of the group size (norms, biases, 1-D and non-divisible
// tensors stay in floating point), config.json with mlx-lm's
// "quantization" section (per-module entries for overrides), and every
// other file of the folder (tokenizer, templates) copied.
func Convert(src, dst string, opts ConvertOptions) (err error) {
	defer tensor.Recover(&err)
	if opts.Spec.Bits == 0 {
		opts.Spec.Bits = 4
	}
	if opts.Spec.GroupSize == 0 {
		opts.Spec.GroupSize = 64
	}
	def := opts.Spec
	if err := checkSpec("convert", def); opts.Quantize && err != nil {
		return err
	}
	for _, o := range opts.Overrides {
		if o.Spec != nil {
			if err := checkSpec("override "+o.Match, *o.Spec); err != nil {
				return err
			}
		}
	}
	cfg, err := model.ReadConfig(src)
	if err != nil {
		return err
	}
	if cfg.Quant != nil {
		return fmt.Errorf("quant: convert: %s is already quantized", src)
	}
	// decide says whether and how the module mod is quantized (explicit:
	// an override named it).
	decide := func(mod string, shape []int, dt tensor.DType) (spec tensor.QuantSpec, quant, explicit bool) {
		spec, quant = def, opts.Quantize
		for _, o := range opts.Overrides {
			if mod == o.Match || strings.HasSuffix(mod, "."+o.Match) {
				explicit = true
				if o.Spec == nil {
					quant = false
				} else {
					spec, quant = *o.Spec, true
				}
				break
			}
		}
		k := shape[len(shape)-1]
		quant = quant && quantizableModule(mod, shape, dt) && k%spec.GroupSize == 0 && (k*spec.Bits)%32 == 0
		return spec, quant, explicit
	}
	gptqOut := map[string][3]*tensor.Array{}
	defer func() {
		for _, r := range gptqOut {
			tensor.Free(r[:]...)
		}
	}()
	switch opts.Method {
	case "", MethodRTN:
	case MethodGPTQ:
		if !opts.Quantize {
			return fmt.Errorf("quant: convert: method %q needs quantization on", opts.Method)
		}
		outType := func(stored tensor.DType) tensor.DType {
			if opts.DType.Valid() {
				return opts.DType
			}
			return stored
		}
		if err := runGPTQ(src, opts, func(mod string, shape []int, stored tensor.DType) (tensor.QuantSpec, tensor.DType, bool) {
			spec, quant, _ := decide(mod, shape, stored)
			return spec, outType(stored), quant
		}, gptqOut); err != nil {
			return err
		}
	default:
		return fmt.Errorf("quant: convert: unknown quantization method %q (want %q or %q)", opts.Method, MethodRTN, MethodGPTQ)
	}
	set, err := safetensors.OpenDir(src)
	if err != nil {
		return fmt.Errorf("quant: convert: %w", err)
	}
	defer set.Close()
	be := opts.Backend
	if be == nil {
		be = tensor.Default()
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}

	out := map[string]*tensor.Array{}
	defer freeAll(out)
	load := func(name string) *tensor.Array { return loadAs(set, be, name, opts.DType, "convert") }
	// group per-expert weights: base.switch_mlp.proj → expert → name
	stacks := map[string]map[int]string{}
	var plain []string
	for _, name := range set.Names() {
		if m := expertRE.FindStringSubmatch(name); m != nil {
			key := m[1] + ".switch_mlp." + m[3]
			e, _ := strconv.Atoi(m[2])
			if stacks[key] == nil {
				stacks[key] = map[int]string{}
			}
			stacks[key][e] = name
			continue
		}
		plain = append(plain, name)
	}
	modules := map[string]*tensor.QuantSpec{} // per-module entries for config.json
	put := func(mod string, w *tensor.Array) {
		spec, quant, explicit := decide(mod, w.Shape(), w.DType())
		if quant {
			var wq, s, b *tensor.Array
			if r, ok := gptqOut[mod]; ok {
				wq, s, b = r[0], r[1], r[2]
				delete(gptqOut, mod)
			} else {
				wq, s, b = tensor.Quantize(w, spec.GroupSize, spec.Bits)
			}
			tensor.Detach(wq, s, b)
			w.Free()
			out[mod+".weight"], out[mod+".scales"], out[mod+".biases"] = wq, s, b
			if explicit && spec != def {
				sp := spec
				modules[mod] = &sp
			}
			return
		}
		if explicit && opts.Quantize && quantizableModule(mod, w.Shape(), w.DType()) {
			modules[mod] = nil
		}
		out[mod+".weight"] = w
	}
	for _, name := range plain {
		a := load(name)
		switch {
		case strings.HasSuffix(name, ".experts.gate_up_proj") && a.NDim() == 3:
			base := model.BankPath(strings.TrimSuffix(name, ".experts.gate_up_proj"))
			h := a.Dim(1) / 2
			for i, proj := range []string{"gate_proj", "up_proj"} {
				v := tensor.SliceAxis(a, 1, i*h, (i+1)*h)
				c := tensor.Contiguous(v)
				tensor.Detach(c)
				v.Free()
				put(base+proj, c)
			}
			a.Free()
		case strings.HasSuffix(name, ".experts.down_proj") && a.NDim() == 3:
			put(model.BankPath(strings.TrimSuffix(name, ".experts.down_proj"))+"down_proj", a)
		case strings.HasSuffix(name, ".weight"):
			put(strings.TrimSuffix(name, ".weight"), a)
		default:
			out[name] = a
		}
	}
	for _, key := range slices.Sorted(maps.Keys(stacks)) {
		experts := stacks[key]
		parts := make([]*tensor.Array, len(experts))
		for e := range parts {
			name, ok := experts[e]
			if !ok {
				return fmt.Errorf("quant: convert: %s: expert %d of %d missing for %s", src, e, len(experts), key)
			}
			parts[e] = load(name)
		}
		st := tensor.Stack(parts, 0)
		tensor.Detach(st)
		tensor.Free(parts...)
		put(key, st)
	}

	if len(gptqOut) > 0 { // every calibrated module must have found its tensor
		return fmt.Errorf("quant: convert: gptq quantized modules the checkpoint does not store under those names: %v", slices.Sorted(maps.Keys(gptqOut)))
	}
	if err := safetensors.WriteArrays(filepath.Join(dst, safetensors.SingleName), out, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("quant: convert: %w", err)
	}
	if err := writeConfig(cfg, dst, opts, def, modules); err != nil {
		return err
	}
	return copyExtras(src, dst)
}

// quantizableModule reports whether Convert may quantize the weight of
// module mod: a float matrix (or expert bank) that is not a norm.
func quantizableModule(mod string, shape []int, dt tensor.DType) bool {
	return len(shape) >= 2 && dt.IsFloat() && !strings.Contains(strings.ToLower(mod), "norm")
}

// checkSpec refuses a spec the kernels do not implement, naming where it
// was given.
func checkSpec(where string, s tensor.QuantSpec) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %v", model.ErrUnsupported, where, err)
	}
	return nil
}

// Dequantize writes a floating-point copy of the MLX-quantized checkpoint
// in src to dst, as mlx-lm's `convert --dequantize` does: every quantized
// module expanded with its own bits and group size from config.json, the
// other tensors copied; all float tensors in dt (Invalid: a quantized
// module in its scales' type, the rest as stored); config.json without its
// quantization section; the folder's other files copied. It is also the
// reference a quantized model is checked against: the float model it
// must reproduce.
func Dequantize(src, dst string, dt tensor.DType) (err error) {
	defer tensor.Recover(&err)
	if dt != tensor.Invalid && !dt.IsFloat() {
		return fmt.Errorf("quant: dequantize: %s is not a float type", dt)
	}
	cfg, err := model.ReadConfig(src)
	if err != nil {
		return err
	}
	if cfg.Quant == nil {
		return fmt.Errorf("quant: dequantize: %s is not quantized", src)
	}
	set, err := safetensors.OpenDir(src)
	if err != nil {
		return fmt.Errorf("quant: dequantize: %w", err)
	}
	defer set.Close()
	out := map[string]*tensor.Array{}
	defer freeAll(out)
	load := func(name string) *tensor.Array { return loadAs(set, nil, name, tensor.Invalid, "dequantize") }
	for _, name := range set.Names() {
		base := name[:max(strings.LastIndexByte(name, '.'), 0)]
		switch {
		case strings.HasSuffix(name, ".scales"):
			spec, ok := cfg.Quant.For(base)
			if !ok {
				return fmt.Errorf("quant: dequantize: %s: module %q is quantized but config.json marks it false", src, base)
			}
			wq, s, b := load(base+".weight"), load(name), load(base+".biases")
			to := dt
			if to == tensor.Invalid {
				to = s.DType()
			}
			out[base+".weight"] = tensor.Dequantize(wq, s, b, spec.GroupSize, spec.Bits, to)
			tensor.Free(wq, s, b)
		case set.Has(base+".scales") && (name == base+".weight" || name == base+".biases"): // the packed weight and biases of a module done above (not its other tensors: a router's correction bias)
		default:
			out[name] = loadAs(set, nil, name, dt, "dequantize")
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := safetensors.WriteArrays(filepath.Join(dst, safetensors.SingleName), out, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("quant: dequantize: %w", err)
	}
	if err := writeConfig(cfg, dst, ConvertOptions{DType: dt}, tensor.QuantSpec{}, nil); err != nil {
		return err
	}
	return copyExtras(src, dst)
}

// loadAs reads a stored tensor onto be (nil: the default backend),
// converted to dt when dt is valid and the tensor is floating point. It
// panics with a *tensor.Error naming op on a read error.
func loadAs(set *safetensors.Set, be tensor.Backend, name string, dt tensor.DType, op string) *tensor.Array {
	a, err := set.Array(name, be, true)
	if err != nil {
		panic(&tensor.Error{Op: op, Err: err})
	}
	tensor.Detach(a)
	if dt.Valid() && a.DType().IsFloat() && a.DType() != dt {
		c := tensor.AsType(a, dt)
		tensor.Detach(c)
		a.Free()
		a = c
	}
	return a
}

// freeAll frees every array of m.
func freeAll(m map[string]*tensor.Array) {
	for _, a := range m {
		a.Free()
	}
}

// writeConfig writes config.json with the quantization section added.
func writeConfig(cfg *model.Config, dst string, opts ConvertOptions, def tensor.QuantSpec, modules map[string]*tensor.QuantSpec) error {
	var m map[string]any
	if err := json.Unmarshal(cfg.Raw, &m); err != nil {
		return err
	}
	delete(m, "quantization")
	delete(m, "quantization_config")
	if opts.Quantize {
		q := &model.QuantConfig{QuantSpec: def, Mode: "affine", Modules: modules}
		m["quantization"] = q
		m["quantization_config"] = q
	}
	if opts.DType.Valid() {
		m["torch_dtype"] = opts.DType.String()
		if _, ok := m["dtype"]; ok {
			m["dtype"] = opts.DType.String()
		}
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "config.json"), append(raw, '\n'), 0o644)
}

// copyExtras copies the folder's other files (tokenizer, templates,
// generation config), skipping weights and the config Convert rewrote.
func copyExtras(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || n == "config.json" || strings.HasSuffix(n, ".safetensors") ||
			n == safetensors.IndexName || slices.Contains([]string{".", ".."}, n) || strings.HasPrefix(n, ".") {
			continue
		}
		if err := copyFile(filepath.Join(src, n), filepath.Join(dst, n)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
