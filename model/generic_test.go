package model_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// genericFixtures are the generic tier's fixtures (tools/oracle/models_more.py).
var genericFixtures = []string{
	"llama_linear", "mistral", "ministral", "qwen2_yarn", "smollm3", "olmo2",
	"granite", "starcoder2", "gemma3", "gemma", "glm4", "glm4_moe", "phi3_longrope",
}

// checkFixture holds one fixture folder's float32 checkpoint to HF: the
// prompt's logits prefilled at once and in chunks of 3 within 1e-4 of
// max|logit|, and the greedy tokens through the caches at prefill chunk
// sizes 1, 3 and 2048, on every backend.
func checkFixture(t *testing.T, dir string) {
	t.Helper()
	model.ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
		g := readGolden(t, dir)
		before := tensor.LiveArrays()
		m, err := model.Load(filepath.Join(dir, "f32"), nil)
		if err != nil {
			t.Fatal(err)
		}
		compareLogits(t, "one-shot prefill", prefillLogits(t, m, g.Prompt, 0), g.LogitsF32)
		compareLogits(t, "prefill in chunks of 3", prefillLogits(t, m, g.Prompt, 3), g.LogitsF32)
		for _, chunk := range []int{1, 3, 2048} {
			got, err := modeltest.Greedy(m, g.Prompt, len(g.GreedyF32), chunk, nil)
			if err != nil {
				t.Fatal(err)
			}
			equalIDs(t, fmt.Sprintf("greedy, prefill chunk %d", chunk), got, g.GreedyF32)
		}
		m.Close()
		if after := tensor.LiveArrays(); after != before {
			t.Errorf("live arrays %d → %d: leak", before, after)
		}
	})
}

func TestGenericParity(t *testing.T) {
	for _, v := range genericFixtures {
		t.Run(v, func(t *testing.T) { checkFixture(t, filepath.Join("testdata", "generic_"+v)) })
	}
}

// TestGenericWeightAudit: a checkpoint with a tensor the architecture
// does not read, or without one it reads, is refused naming the tensor.
func TestGenericWeightAudit(t *testing.T) {
	src := filepath.Join("testdata", "generic_gemma3", "f32")
	extra := rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.Tensor{Name: "model.layers.0.self_attn.extra_proj.weight", DType: tensor.Float32, Shape: []int{2}, Data: make([]byte, 8)})
	}, nil)
	_, err := model.Load(extra, nil)
	if err == nil || !errors.Is(err, model.ErrCheckpoint) || !strings.Contains(err.Error(), "model.layers.0.self_attn.extra_proj.weight") {
		t.Errorf("extra tensor: got %v, want a checkpoint error naming it", err)
	}
	missing := rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor {
		var out []safetensors.Tensor
		for _, x := range ts {
			if x.Name != "model.layers.1.pre_feedforward_layernorm.weight" {
				out = append(out, x)
			}
		}
		return out
	}, nil)
	_, err = model.Load(missing, nil)
	if err == nil || !errors.Is(err, model.ErrCheckpoint) || !strings.Contains(err.Error(), "model.layers.1.pre_feedforward_layernorm.weight") {
		t.Errorf("missing tensor: got %v, want a checkpoint error naming it", err)
	}
}

// TestUnknownArchitectureRefused: a model_type nobody registered is
// refused at load by name, listing what we run.
func TestUnknownArchitectureRefused(t *testing.T) {
	src := filepath.Join("testdata", "generic_mistral", "f32")
	dir := rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, func(m map[string]any) {
		m["model_type"] = "frobnicator"
		m["architectures"] = []string{"FrobnicatorForCausalLM"}
	})
	_, err := model.Load(dir, nil)
	if err == nil || !errors.Is(err, model.ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
	for _, want := range []string{"frobnicator", "FrobnicatorForCausalLM", "gemma3_text", "starcoder2", "qwen2", "phi3", "olmo2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
