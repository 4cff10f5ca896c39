package lora_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// writeAdapter writes a PEFT-format adapter (or mlx-lm's, when file is
// adapters.safetensors) with cfg and random tensors of the given shapes.
func writeAdapter(t *testing.T, file string, cfg map[string]any, shapes map[string][]int) string {
	t.Helper()
	dir := t.TempDir()
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	arrs := map[string]*tensor.Array{}
	for n, s := range shapes {
		k := 1
		for _, d := range s {
			k *= d
		}
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(i%7) * 0.01
		}
		arrs[n] = tensor.FromFloat32(v, s, tensor.Float32)
	}
	defer func() {
		for _, a := range arrs {
			a.Free()
		}
	}()
	if err := safetensors.WriteArrays(filepath.Join(dir, file), arrs, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func peftCfg(extra map[string]any) map[string]any {
	c := map[string]any{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": []string{"q_proj", "k_proj"}, "bias": "none"}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

const q0 = "base_model.model.model.layers.0.self_attn.q_proj"

func TestRefusals(t *testing.T) {
	good := map[string][]int{q0 + ".lora_A.weight": {8, 64}, q0 + ".lora_B.weight": {64, 8}}
	cases := []struct {
		name string
		dir  string
		kind error
		want []string // substrings of the error
		// mount: the error comes from fitting the llama3 fixture
		mount bool
	}{
		{"dora config", writeAdapter(t, "adapter_model.safetensors", peftCfg(map[string]any{"use_dora": true}), good),
			model.ErrUnsupported, []string{"DoRA"}, false},
		{"dora tensor", writeAdapter(t, "adapter_model.safetensors", peftCfg(nil), map[string][]int{
			q0 + ".lora_A.weight": {8, 64}, q0 + ".lora_B.weight": {64, 8}, q0 + ".lora_magnitude_vector": {64}}),
			model.ErrUnsupported, []string{"DoRA", "lora_magnitude_vector"}, false},
		{"mlx dora", writeAdapter(t, "adapters.safetensors", map[string]any{"fine_tune_type": "dora", "lora_parameters": map[string]any{"rank": 8, "scale": 2.0}},
			map[string][]int{"model.layers.0.self_attn.q_proj.lora_a": {64, 8}, "model.layers.0.self_attn.q_proj.lora_b": {8, 64}}),
			model.ErrUnsupported, []string{"DoRA"}, false},
		{"embedding", writeAdapter(t, "adapter_model.safetensors", peftCfg(map[string]any{"target_modules": []string{"embed_tokens"}}), map[string][]int{
			"base_model.model.model.embed_tokens.lora_embedding_A": {8, 256}, "base_model.model.model.embed_tokens.lora_embedding_B": {64, 8}}),
			model.ErrUnsupported, []string{"embedding"}, false},
		{"rank vs config", writeAdapter(t, "adapter_model.safetensors", peftCfg(map[string]any{"r": 4}), good),
			lora.ErrAdapter, []string{"self_attn.q_proj", "rank 8", "says 4"}, false},
		{"rank_pattern", writeAdapter(t, "adapter_model.safetensors", peftCfg(map[string]any{"rank_pattern": map[string]int{"q_proj": 6}}), good),
			lora.ErrAdapter, []string{"self_attn.q_proj", "rank 8", "says 6"}, false},
		{"not targeted", writeAdapter(t, "adapter_model.safetensors", peftCfg(map[string]any{"target_modules": []string{"v_proj"}}), good),
			lora.ErrAdapter, []string{"self_attn.q_proj", "target_modules"}, false},
		{"half a pair", writeAdapter(t, "adapter_model.safetensors", peftCfg(nil), map[string][]int{q0 + ".lora_A.weight": {8, 64}}),
			lora.ErrAdapter, []string{"self_attn.q_proj", "only one"}, false},
		{"no scale", writeAdapter(t, "adapters.safetensors", map[string]any{"fine_tune_type": "lora", "lora_parameters": map[string]any{"rank": 8}},
			map[string][]int{"model.layers.0.self_attn.q_proj.lora_a": {64, 8}, "model.layers.0.self_attn.q_proj.lora_b": {8, 64}}),
			lora.ErrAdapter, []string{"scale"}, false},
		{"wrong width", writeAdapter(t, "adapter_model.safetensors", peftCfg(nil), map[string][]int{
			q0 + ".lora_A.weight": {8, 64}, q0 + ".lora_B.weight": {64, 8},
			"base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight": {8, 64}, "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight": {48, 8}}),
			lora.ErrAdapter, []string{"model.layers.1.self_attn.k_proj", "B [48, 8] (out, r)", "[in 64 → out 32]"}, true},
		{"no such layer", writeAdapter(t, "adapter_model.safetensors", peftCfg(nil), map[string][]int{
			"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight": {8, 64}, "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight": {64, 8}}),
			lora.ErrAdapter, []string{"model.layers.7.self_attn.q_proj", "not a projection"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := tensor.LiveArrays()
			var err error
			if c.mount {
				var m *lora.Model
				m, err = lora.Open(fixture("llama3"), nil, adapterDir("llama3", "a_peft"), c.dir)
				if m != nil {
					m.Close()
					t.Fatal("Open mounted an adapter that does not fit")
				}
			} else {
				var a *lora.Adapter
				a, err = lora.Load(c.dir, nil)
				if a != nil {
					a.Free()
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, c.kind) {
				t.Errorf("error %v is not %v", err, c.kind)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if after := tensor.LiveArrays(); after != before {
				t.Errorf("live arrays %d → %d after a refused adapter", before, after)
			}
		})
	}
}

func TestSelectionErrors(t *testing.T) {
	m, err := lora.Open(fixture("llama3"), nil, adapterDir("llama3", "a_peft"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sc := tensor.NewScope()
	defer sc.Close()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	if _, err := m.With(lora.Selection{Set: []string{"nope"}}).Forward(ids2D([]int32{1, 2}), caches, nil); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown adapter id: error %v", err)
	}
	spans := lora.Selection{Spans: []lora.Span{{Rows: 1, Set: []string{"a_peft"}}}}
	if _, err := m.With(spans).Forward(ids2D([]int32{1, 2}), caches, nil); err == nil || !strings.Contains(err.Error(), "cover 1 rows") {
		t.Errorf("spans of 1 row over a 2-row pass: error %v", err)
	}
	if _, err := m.Host().Mount("a+b", &lora.Adapter{}); err == nil {
		t.Error("Mount accepted an id with '+'")
	}
	if m.Host().Unmount("nope") {
		t.Error("Unmount of an id never mounted reported true")
	}
}

func TestSpecAndKey(t *testing.T) {
	if got := lora.ParseSet("a+b"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("ParseSet(a+b) = %v", got)
	}
	for _, s := range []string{"", "none"} {
		if got := lora.ParseSet(s); got != nil {
			t.Errorf("ParseSet(%q) = %v, want the base (nil)", s, got)
		}
	}
	m, err := lora.Open(fixture("llama3"), nil, adapterDir("llama3", "a_peft"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Host()
	if err := h.Check([]string{"a_peft", "x"}); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("Check with an unknown id: %v", err)
	}
	k1, err := h.Key([]string{"a_peft"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k1, "sha256:") || !lora.Persistent(k1) {
		t.Errorf("key of a loaded adapter %q, want sha256:… (persistent)", k1)
	}
	mt, _ := h.Mounted("a_peft")
	a := mt.Adapter
	h.Unmount("a_peft")
	if _, err := h.Mount("a_peft", a); err != nil {
		t.Fatal(err)
	}
	// the same files, remounted: the same key
	if k2, _ := h.Key([]string{"a_peft"}); k2 != k1 {
		t.Errorf("keys before and after remounting the same files: %q, %q", k1, k2)
	}
	// other files under the same id: another key
	b, err := lora.Load(adapterDir("llama3", "b_peft"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	h.Unmount("a_peft")
	if _, err := h.Mount("a_peft", b); err != nil {
		t.Fatal(err)
	}
	if k3, _ := h.Key([]string{"a_peft"}); k3 == k1 {
		t.Errorf("adapter b mounted as a_peft has a's key %q", k3)
	}
	// an adapter not read from files: its mount's serial
	c := *b
	c.Digest = ""
	if _, err := h.Mount("c", &c); err != nil {
		t.Fatal(err)
	}
	kc, _ := h.Key([]string{"c"})
	if !strings.HasPrefix(kc, "c#") || lora.Persistent(kc) || lora.Persistent(k1+"+"+kc) {
		t.Errorf("key of an adapter made in memory %q, want c#N (not persistent)", kc)
	}
	if ka, _ := h.Key([]string{"a_peft", "c"}); ka == kc || !strings.Contains(ka, "+") {
		t.Errorf("stacked key %q", ka)
	}
	h.Unmount("a_peft")
	h.Unmount("c")
	if _, err := h.Mount("a_peft", a); err != nil {
		t.Fatal(err)
	}
	if k, _ := h.Key(nil); k != "" {
		t.Errorf("base key %q, want empty", k)
	}
}
