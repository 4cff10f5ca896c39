package lora_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// moeGolden is what tools/oracle/lora_moe.py writes for each MoE fixture.
type moeGolden struct {
	golden
	Layout string `json:"layout"`
	Layers []struct {
		Prefix     string             `json:"prefix"`
		Parameter  string             `json:"parameter"`
		NumExperts int                `json:"num_experts"`
		R          map[string]int     `json:"r"`
		Scale      map[string]float64 `json:"scale"`
	} `json:"layers"`
}

// checkMoEParity loads a MoE fixture with PEFT adapters a and b, which
// adapt the attention, the dense MLPs and the experts (transformers 5's
// fused expert tensors, through PEFT's target_parameters), and checks
// each selection against PEFT.
func checkMoEParity(t *testing.T, variant string) {
	raw, err := os.ReadFile(filepath.Join("testdata", variant, "golden.json"))
	if err != nil {
		t.Skipf("no MoE LoRA goldens for %s (tools/oracle/lora_moe.py): %v", variant, err)
	}
	var g moeGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	before := tensor.LiveArrays()
	m, err := lora.Open(fixture(variant), &model.LoadOptions{DType: tensor.Float32},
		adapterDir(variant, "a_peft"), adapterDir(variant, "b_peft"))
	if err != nil {
		t.Fatal(err)
	}
	// every expert parameter PEFT adapted became bank pairs with its rank
	// and scale
	banks := 0
	for _, l := range g.Layers {
		if l.Parameter == "" {
			continue
		}
		block := strings.TrimSuffix(strings.TrimSuffix(l.Prefix, ".base_layer"), ".experts")
		projs := map[string][]string{"gate_up_proj": {"gate_proj", "up_proj"}, "down_proj": {"down_proj"}}[l.Parameter]
		for which, id := range map[string]string{"a": "a_peft", "b": "b_peft"} {
			mt, _ := m.Host().Mounted(id)
			for _, proj := range projs {
				key := lora.Relative(model.BankPath(block) + proj)
				d := mt.Adapter.Deltas[key]
				switch {
				case d == nil:
					t.Errorf("%s: no pair for %s (%s of %s)", id, key, l.Parameter, l.Prefix)
				case d.Experts != l.NumExperts || d.Rank != l.R[which] || math.Abs(d.Scale-l.Scale[which]) > 1e-12*l.Scale[which]:
					t.Errorf("%s: %s: %d experts rank %d scale %v, PEFT %d, %d, %v", id, key, d.Experts, d.Rank, d.Scale, l.NumExperts, l.R[which], l.Scale[which])
				default:
					banks++
				}
			}
		}
	}
	if g.Layout == "parameters" && banks == 0 {
		t.Error("the goldens list no adapted expert parameter")
	}
	checkDeltas(t, variant, m)
	sel := func(ids ...string) *lora.Model { return m.With(lora.Selection{Set: ids}) }
	compareLogits(t, "adapter a (PEFT)", promptLogits(t, sel("a_peft"), g.Prompt), g.LogitsA)
	compareLogits(t, "adapter b (PEFT, rank/alpha patterns, rslora)", promptLogits(t, sel("b_peft"), g.Prompt), g.LogitsB)
	compareLogits(t, "adapters a+b", promptLogits(t, sel("a_peft", "b_peft"), g.Prompt), g.LogitsAB)
	compareLogits(t, "base after adapters", promptLogits(t, sel(), g.Prompt), baseLogits(t, variant))
	greedy(t, "base", sel(), g.Prompt, g.GreedyBase)
	greedy(t, "adapter a", sel("a_peft"), g.Prompt, g.GreedyA)
	greedy(t, "adapter b", sel("b_peft"), g.Prompt, g.GreedyB)
	greedy(t, "adapters a+b", sel("a_peft", "b_peft"), g.Prompt, g.GreedyAB)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("live arrays %d → %d: leak", before, after)
	}
}

// checkDeltas compares each expert bank's merged residual scale·B_e·A_e
// of adapter a with PEFT's own delta weight of the fused parameter
// (deltas_a.safetensors: [E, 2I, D] for gate_up_proj, [E, D, I] for
// down_proj).
func checkDeltas(t *testing.T, variant string, m *lora.Model) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join("testdata", variant, "deltas_a.safetensors"))
	if err != nil {
		return // the per-expert layout has no fused parameters
	}
	defer f.Close()
	mt, _ := m.Host().Mounted("a_peft")
	sc := tensor.NewScope()
	defer sc.Close()
	for _, name := range f.Names() {
		prefix, param, _ := strings.Cut(name, "|")
		block := strings.TrimSuffix(strings.TrimSuffix(prefix, ".base_layer"), ".experts")
		want, err := f.Array(name, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		merged := func(proj string) *tensor.Array {
			d := mt.Adapter.Deltas[lora.Relative(model.BankPath(block)+proj)]
			if d == nil {
				t.Fatalf("%s: no pair for %s", name, proj)
			}
			return tensor.MulScalar(tensor.Matmul(tensor.AsType(d.B, tensor.Float32), tensor.AsType(d.A, tensor.Float32)), d.Scale)
		}
		var got *tensor.Array
		if param == "gate_up_proj" {
			got = tensor.Concatenate([]*tensor.Array{merged("gate_proj"), merged("up_proj")}, 1)
		} else {
			got = merged("down_proj")
		}
		gv, wv := f32s(t, got), f32s(t, want)
		if len(gv) != len(wv) {
			t.Fatalf("%s: %v elements, PEFT %v (shapes %v, %v)", name, len(gv), len(wv), got.Shape(), want.Shape())
		}
		maxAbs, maxDiff := 0.0, 0.0
		for i := range wv {
			maxAbs = math.Max(maxAbs, math.Abs(float64(wv[i])))
			maxDiff = math.Max(maxDiff, math.Abs(float64(gv[i]-wv[i])))
		}
		if maxDiff > 1e-5*maxAbs {
			t.Errorf("%s: merged residual differs from PEFT's delta weight by %.3g (max |Δ| %.3g)", name, maxDiff, maxAbs)
		}
	}
}

func TestParityQwen3MoE(t *testing.T)  { checkMoEParity(t, "qwen3_moe") }
func TestParityGemma4MoE(t *testing.T) { checkMoEParity(t, "gemma4_moe") }

// TestTargetParametersRefused: target_parameters on a parameter other than
// the fused expert tensors is refused with ErrUnsupported naming it.
func TestTargetParametersRefused(t *testing.T) {
	src := adapterDir("qwen3_moe", "a_peft")
	raw, err := os.ReadFile(filepath.Join(src, "adapter_config.json"))
	if err != nil {
		t.Skipf("no MoE LoRA goldens (tools/oracle/lora_moe.py): %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["target_parameters"] = []string{"experts.gate_up_proj", "experts.router_bias"}
	dir := t.TempDir()
	out, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(filepath.Join(src, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), w, 0o644); err != nil {
		t.Fatal(err)
	}
	before := tensor.LiveArrays()
	_, err = lora.Load(dir, nil)
	if !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "router_bias") {
		t.Errorf("Load: %v, want ErrUnsupported naming router_bias", err)
	}
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("live arrays %d → %d after a refused load", before, after)
	}
}
