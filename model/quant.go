package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// QuantConfig is config.json's "quantization" (or "quantization_config")
// in mlx-lm's form: defaults plus per-module entries keyed by the module's
// full path ("model.layers.0.mlp.gate"), each a spec or false (kept in
// floating point). Whether a module is quantized is decided, as in mlx-lm,
// by the presence of its ".scales" tensor; the config says with what.
type QuantConfig struct {
	tensor.QuantSpec
	// Mode is "affine" (the only mode supported).
	Mode string
	// Modules holds per-module overrides; a nil value means false.
	Modules map[string]*tensor.QuantSpec
}

// For returns the spec for the module at path and whether the config
// allows it to be quantized (false for an explicit `false` entry).
func (q *QuantConfig) For(path string) (tensor.QuantSpec, bool) {
	if s, ok := q.Modules[path]; ok {
		if s == nil {
			return tensor.QuantSpec{}, false
		}
		return *s, true
	}
	return q.QuantSpec, true
}

// MarshalJSON writes the config back in mlx-lm's flat form.
func (q *QuantConfig) MarshalJSON() ([]byte, error) {
	m := map[string]any{"group_size": q.GroupSize, "bits": q.Bits, "mode": q.Mode}
	for k, v := range q.Modules {
		if v == nil {
			m[k] = false
		} else {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// checkSpec refuses a spec the kernels do not implement, naming where
// the config gave it.
func checkSpec(where string, s tensor.QuantSpec) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupported, where, err)
	}
	return nil
}

// parseQuant reads "quantization", falling back to "quantization_config"
// (mlx-community writes both, identical). A quantization_config from
// another toolchain (it names a quant_method) is refused: those formats
// are not MLX's affine one.
func parseQuant(quant, quantConfig json.RawMessage) (*QuantConfig, error) {
	src, key := quant, "quantization"
	if len(src) == 0 || string(src) == "null" {
		src, key = quantConfig, "quantization_config"
	}
	if len(src) == 0 || string(src) == "null" {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(src, &fields); err != nil {
		return nil, fmt.Errorf("%w: config.json %s: %v", ErrCheckpoint, key, err)
	}
	q := &QuantConfig{Mode: "affine", QuantSpec: tensor.QuantSpec{GroupSize: 64, Bits: 4}, Modules: map[string]*tensor.QuantSpec{}}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		var err error
		switch k {
		case "group_size":
			err = json.Unmarshal(v, &q.GroupSize)
		case "bits":
			err = json.Unmarshal(v, &q.Bits)
		case "mode":
			err = json.Unmarshal(v, &q.Mode)
		case "quant_method":
			var m string
			_ = json.Unmarshal(v, &m)
			if m != "mlx" && m != "affine" {
				return nil, fmt.Errorf("%w: %s with quant_method %q (only MLX affine checkpoints are supported; convert with `mlxgo convert`)", ErrUnsupported, key, m)
			}
		default:
			var off bool
			if json.Unmarshal(v, &off) == nil {
				if off {
					return nil, fmt.Errorf("%w: %s[%q] is true (want false or {bits, group_size})", ErrCheckpoint, key, k)
				}
				q.Modules[k] = nil
				continue
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(v, &obj) != nil {
				continue // other scalar settings some writers add; not a module entry
			}
			s := &tensor.QuantSpec{GroupSize: -1, Bits: -1}
			if err := json.Unmarshal(v, s); err != nil {
				return nil, fmt.Errorf("%w: %s[%q]: %v", ErrCheckpoint, key, k, err)
			}
			q.Modules[k] = s
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s.%s: %v", ErrCheckpoint, key, k, err)
		}
	}
	if q.Mode != "affine" {
		return nil, fmt.Errorf("%w: quantization mode %q (only \"affine\")", ErrUnsupported, q.Mode)
	}
	if err := checkSpec(key, q.QuantSpec); err != nil {
		return nil, err
	}
	for k, s := range q.Modules {
		if s == nil {
			continue
		}
		if s.GroupSize == -1 {
			s.GroupSize = q.GroupSize
		}
		if s.Bits == -1 {
			s.Bits = q.Bits
		}
		if err := checkSpec(key+"["+k+"]", *s); err != nil {
			return nil, err
		}
	}
	return q, nil
}
