package model_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// rewrite copies the checkpoint's tensors through edit (which may drop,
// replace or add entries) into a fresh folder with config edited by cfg.
func rewrite(t *testing.T, src string, edit func([]safetensors.Tensor) []safetensors.Tensor, cfg func(map[string]any)) string {
	t.Helper()
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var ts []safetensors.Tensor
	for _, n := range set.Names() {
		info, _ := set.Info(n)
		b, _ := set.Bytes(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)})
	}
	dst := t.TempDir()
	if err := safetensors.Write(filepath.Join(dst, "model.safetensors"), edit(ts), nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(src, "config.json"))
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if cfg != nil {
		cfg(m)
	}
	raw, _ = json.Marshal(m)
	_ = os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644)
	return dst
}

// quantizeCheckpoint writes a 4-bit (group 64) MLX copy of the float
// checkpoint in src, every matrix rounded by tensor.Quantize: a quantized
// checkpoint to damage, made without the quant module (which imports
// model).
func quantizeCheckpoint(t *testing.T, src string) string {
	t.Helper()
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	out := map[string]*tensor.Array{}
	defer func() {
		for _, a := range out {
			a.Free()
		}
	}()
	for _, n := range set.Names() {
		a, err := set.Array(n, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if a.NDim() != 2 || !strings.HasSuffix(n, ".weight") {
			out[n] = a
			continue
		}
		base := strings.TrimSuffix(n, ".weight")
		out[n], out[base+".scales"], out[base+".biases"] = tensor.Quantize(a, 64, 4)
		a.Free()
	}
	dst := t.TempDir()
	if err := safetensors.WriteArrays(filepath.Join(dst, "model.safetensors"), out, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(src, "config.json"))
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	q := map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	m["quantization"], m["quantization_config"] = q, q
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestBadCheckpoints(t *testing.T) {
	src := writeRandomLlama(t, 0.02)
	q4 := quantizeCheckpoint(t, src)
	keep := func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }
	cases := []struct {
		name string
		dir  func() string
		want []string
	}{
		{"missing tensor", func() string {
			return rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor {
				var out []safetensors.Tensor
				for _, x := range ts {
					if x.Name != "model.layers.1.mlp.up_proj.weight" {
						out = append(out, x)
					}
				}
				return out
			}, nil)
		}, []string{"model.layers.1.mlp.up_proj.weight", "missing"}},
		{"wrong shape", func() string {
			return rewrite(t, src, keep, func(m map[string]any) { m["intermediate_size"] = 300 })
		}, []string{"model.layers.0.mlp.gate_proj.weight", "model.safetensors", "shape [256 128], want [300 128]"}},
		{"unknown dtype", func() string {
			return rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i, x := range ts {
					if x.Name == "model.norm.weight" {
						ts[i].RawDType, ts[i].Shape = "F64", []int{64}
					}
				}
				return ts
			}, nil)
		}, []string{"model.norm.weight", "F64"}},
		{"inconsistent quantization", func() string {
			return rewrite(t, q4, keep, func(m map[string]any) {
				m["quantization"] = map[string]any{"group_size": 64, "bits": 8}
				delete(m, "quantization_config")
			})
		}, []string{"model.embed_tokens.weight", "bits=8", "inconsistent quantization"}},
		{"quantized module marked false", func() string {
			return rewrite(t, q4, keep, func(m map[string]any) {
				m["quantization"] = map[string]any{"group_size": 64, "bits": 4, "lm_head": false}
				delete(m, "quantization_config")
			})
		}, []string{"lm_head", "false"}},
		{"truncated shard", func() string {
			d := rewrite(t, src, keep, nil)
			p := filepath.Join(d, "model.safetensors")
			st, _ := os.Stat(p)
			_ = os.Truncate(p, st.Size()-1000)
			return d
		}, []string{"model.safetensors"}},
		{"unsupported model", func() string {
			return rewrite(t, src, keep, func(m map[string]any) { m["model_type"] = "mamba9"; m["architectures"] = []string{"Mamba9ForCausalLM"} })
		}, []string{"mamba9", "Mamba9ForCausalLM", "supported", "llama", "qwen3_moe"}},
	}
	before := tensor.LiveArrays()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := model.Load(c.dir(), nil)
			if err == nil {
				m.Close()
				t.Fatal("loaded without error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if c.name == "unsupported model" && !errors.Is(err, model.ErrUnsupported) {
				t.Errorf("error %v is not ErrUnsupported", err)
			}
		})
	}
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("live arrays %d → %d after failed loads", before, after)
	}
}
