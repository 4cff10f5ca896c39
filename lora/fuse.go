package lora

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// FuseOptions tunes Fuse.
type FuseOptions struct {
	// Dequantize writes every quantized module of the base in floating
	// point (the scales' type) and drops config.json's quantization
	// section. Otherwise an adapted quantized module is quantized again
	// with its own bits and group size, as mlx-lm's fuse does.
	Dequantize bool
	// Backend computes the merge (nil: the default backend).
	Backend tensor.Backend
}

// Fuse writes to dst the checkpoint of the model in src with the adapters
// in the folders given merged into its weights, in order: each adapted
// module's weight W [out, in] becomes W + scale·B·A (per expert for a
// bank), computed in float32 and stored in the weight's type. The other
// tensors are copied as stored; config.json and the folder's other files
// (tokenizer, templates) are copied. The adapters are checked against the
// model as Open checks them. Dense layers and expert banks stored stacked
// (MLX's switch_mlp layout) can be merged; a bank stored per expert or
// fused (Hugging Face layouts) or a head tied to the embeddings is refused
// with ErrUnsupported (convert the checkpoint first, or untie the head).
func Fuse(src, dst string, adapters []string, opts FuseOptions) (err error) {
	defer tensor.Recover(&err)
	if len(adapters) == 0 {
		return fmt.Errorf("lora: fuse: no adapter given")
	}
	if abs(src) == abs(dst) {
		return fmt.Errorf("lora: fuse: the output folder is the model's own (%s)", src)
	}
	m, err := Open(src, &model.LoadOptions{Backend: opts.Backend}, adapters...)
	if err != nil {
		return err
	}
	defer m.Close()
	cfg, err := model.ReadConfig(src)
	if err != nil {
		return err
	}
	set, err := safetensors.OpenDir(src)
	if err != nil {
		return fmt.Errorf("lora: fuse: %w", err)
	}
	defer set.Close()
	be := m.Backend()
	h := m.host

	// the adapted layers, by their stored weight's name
	adapted := map[string]*site{}
	var sets []*Mounted
	for _, id := range h.IDs() {
		mt, _ := h.Mounted(id)
		sets = append(sets, mt)
	}
	for _, key := range h.Modules() {
		s := h.sites[key]
		if len(s.deltas(sets)) == 0 {
			continue
		}
		switch {
		case s.head != nil:
			return fmt.Errorf("lora: fuse: %w: %s is the output head tied to the embedding table; fusing would change the embeddings too", model.ErrUnsupported, s.path)
		case s.lin == nil && s.sw == nil:
			return fmt.Errorf("lora: fuse: %w: %s is a %T", model.ErrUnsupported, s.path, s.proj)
		case s.source != s.path+".weight" || !set.Has(s.source):
			return fmt.Errorf("lora: fuse: %w: the bank %s is stored as %s (a Hugging Face layout); convert the checkpoint to MLX's (mlxgo convert) and fuse that", model.ErrUnsupported, s.path, s.source)
		}
		adapted[s.source] = s
	}

	out := map[string]*tensor.Array{}
	defer func() {
		for _, a := range out {
			a.Free()
		}
	}()
	quantized := func(mod string) bool { return set.Has(mod+".scales") && set.Has(mod+".biases") }
	for _, name := range set.Names() {
		mod := name[:max(strings.LastIndexByte(name, '.'), 0)]
		isWeight := strings.HasSuffix(name, ".weight")
		switch {
		case (strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases")) && quantized(mod) &&
			(opts.Dequantize || adapted[mod+".weight"] != nil):
			// written with the module's weight
		case isWeight && adapted[name] != nil:
			for k, v := range merge(adapted[name], sets, opts.Dequantize) {
				out[k] = v
			}
		case isWeight && opts.Dequantize && quantized(mod):
			if cfg.Quant == nil {
				return fmt.Errorf("lora: fuse: %s: module %q is quantized but config.json has no quantization section", src, mod)
			}
			spec, ok := cfg.Quant.For(mod)
			if !ok {
				return fmt.Errorf("lora: fuse: %s: module %q is quantized but config.json does not say how", src, mod)
			}
			out[name] = readDequantized(set, be, mod, spec)
		default:
			a, err := set.Array(name, be, false)
			if err != nil {
				return fmt.Errorf("lora: fuse: %w", err)
			}
			tensor.Detach(a)
			out[name] = a
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := safetensors.WriteArrays(filepath.Join(dst, safetensors.SingleName), out, map[string]string{"format": "mlx"}); err != nil {
		return fmt.Errorf("lora: fuse: %w", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(cfg.Raw, &raw); err != nil {
		return err
	}
	if opts.Dequantize {
		delete(raw, "quantization")
		delete(raw, "quantization_config")
	}
	b, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return copyExtras(src, dst)
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// merge returns the tensors of the adapted layer s with the pairs of sets
// added to its weight: name.weight, plus name.scales and name.biases when
// it stays quantized.
func merge(s *site, sets []*Mounted, dequantize bool) map[string]*tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	var w, scales *tensor.Array
	var spec tensor.QuantSpec
	var stored tensor.DType
	switch {
	case s.lin != nil:
		w, scales, spec = s.lin.Weight, s.lin.Scales, s.lin.QuantSpec
		if scales != nil {
			w = tensor.Dequantize(w, scales, s.lin.Biases, spec.GroupSize, spec.Bits, tensor.Float32)
		}
	default:
		w, scales, spec = s.sw.Weight, s.sw.Scales, s.sw.QuantSpec
		if scales != nil {
			w = tensor.Dequantize(w, scales, s.sw.Biases, spec.GroupSize, spec.Bits, tensor.Float32)
		}
	}
	stored = w.DType()
	if scales != nil {
		stored = scales.DType()
	}
	w = tensor.AsType(w, tensor.Float32)
	for _, mt := range sets {
		d := mt.Adapter.Deltas[s.key]
		if d == nil {
			continue
		}
		ba := tensor.Matmul(tensor.AsType(d.B, tensor.Float32), tensor.AsType(d.A, tensor.Float32)) // [.., out, in]
		w = tensor.Add(w, tensor.MulScalar(ba, d.Scale))
	}
	base := strings.TrimSuffix(s.source, ".weight")
	res := map[string]*tensor.Array{}
	if scales != nil && !dequantize {
		wq, qs, qb := tensor.Quantize(w, spec.GroupSize, spec.Bits)
		res[base+".weight"] = wq
		res[base+".scales"] = tensor.AsType(qs, stored)
		res[base+".biases"] = tensor.AsType(qb, stored)
	} else {
		res[base+".weight"] = tensor.Contiguous(tensor.AsType(w, stored))
	}
	for _, a := range res {
		sc.Keep(a)
		tensor.Detach(a)
	}
	return res
}

// readDequantized reads the quantized module mod of set as a float
// weight in its scales' type.
func readDequantized(set *safetensors.Set, be tensor.Backend, mod string, spec tensor.QuantSpec) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	get := func(n string) *tensor.Array {
		a, err := set.Array(n, be, false)
		if err != nil {
			panic(&tensor.Error{Op: "lora.Fuse", Err: err})
		}
		return a
	}
	wq, s, b := get(mod+".weight"), get(mod+".scales"), get(mod+".biases")
	out := sc.Keep(tensor.Dequantize(wq, s, b, spec.GroupSize, spec.Bits, s.DType()))
	tensor.Free(wq, s, b)
	tensor.Detach(out)
	return out
}

// copyExtras copies the folder's other regular files (tokenizer,
// templates, generation config), leaving out weights, the config and
// adapter files.
func copyExtras(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	skip := []string{"config.json", safetensors.IndexName, peftConfig, peftWeights, mlxWeights}
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || strings.HasSuffix(n, ".safetensors") || strings.HasPrefix(n, ".") || slices.Contains(skip, n) {
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
