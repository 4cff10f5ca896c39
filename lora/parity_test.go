package lora_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// golden is what tools/oracle/lora.py writes for each fixture.
type golden struct {
	Prompt     []int32                       `json:"prompt"`
	LogitsA    [][]float64                   `json:"logits_a"`
	LogitsB    [][]float64                   `json:"logits_b"`
	LogitsAB   [][]float64                   `json:"logits_ab"`
	GreedyBase []int32                       `json:"greedy_base"`
	GreedyA    []int32                       `json:"greedy_a"`
	GreedyB    []int32                       `json:"greedy_b"`
	GreedyAB   []int32                       `json:"greedy_ab"`
	Scales     map[string]map[string]float64 `json:"scales"`
}

func readGolden(t *testing.T, variant string) golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", variant, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// baseGolden is the fixture's own golden (tools/oracle/models*.py): the
// base model's logits.
func baseLogits(t *testing.T, variant string) [][]float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "model", "testdata", variant, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		LogitsF32 [][]float64 `json:"logits_f32"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g.LogitsF32
}

func fixture(variant string) string { return filepath.Join("..", "model", "testdata", variant, "f32") }
func adapterDir(variant, which string) string {
	return filepath.Join("testdata", variant, which)
}

func ids2D(ids []int32) *tensor.Array {
	raw := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return tensor.FromBytes(raw, []int{1, len(ids)}, tensor.Int32)
}

func f32s(t *testing.T, a *tensor.Array) []float32 {
	t.Helper()
	c := tensor.AsType(a, tensor.Float32)
	defer c.Free()
	b := c.Bytes()
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// promptLogits runs the prompt in one pass and returns every position's
// logits [T][V].
func promptLogits(t *testing.T, m model.Model, prompt []int32) [][]float32 {
	t.Helper()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	sc := tensor.NewScope()
	defer sc.Close()
	h, err := m.Forward(ids2D(prompt), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Logits(h)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Info().Vocab
	flat := f32s(t, l)
	var out [][]float32
	for j := range prompt {
		out = append(out, flat[j*v:(j+1)*v])
	}
	return out
}

// compareLogits checks max |got − want| ≤ 1e-4 · max |want| at every
// position (the model package's parity bar).
func compareLogits(t *testing.T, what string, got [][]float32, want [][]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d positions, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for p := range want {
		maxAbs, maxDiff := 0.0, 0.0
		for i, w := range want[p] {
			maxAbs = math.Max(maxAbs, math.Abs(w))
			maxDiff = math.Max(maxDiff, math.Abs(float64(got[p][i])-w))
		}
		rel := maxDiff / maxAbs
		worst = math.Max(worst, rel)
		if rel > 1e-4 {
			t.Errorf("%s: position %d: max |diff| %.3g = %.3g × max |logit| %.3g (limit 1e-4)", what, p, maxDiff, rel, maxAbs)
		}
	}
	t.Logf("%s: worst max|diff|/max|logit| = %.3g", what, worst)
}

func identical(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for p := range want {
		for i := range want[p] {
			if math.Float32bits(got[p][i]) != math.Float32bits(want[p][i]) {
				t.Fatalf("%s: position %d logit %d: %v, want %v (bit for bit)", what, p, i, got[p][i], want[p][i])
			}
		}
	}
}

func greedy(t *testing.T, what string, m model.Model, prompt, want []int32) []int32 {
	t.Helper()
	got, err := modeltest.Greedy(m, prompt, len(want), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: greedy %v, want %v", what, got, want)
	}
	return got
}

// checkParity loads the fixture once with PEFT adapters a and b and the
// mlx-lm conversion of a mounted, and checks each selection against PEFT.
func checkParity(t *testing.T, variant string) {
	g := readGolden(t, variant)
	before := tensor.LiveArrays()
	m, err := lora.Open(fixture(variant), &model.LoadOptions{DType: tensor.Float32},
		adapterDir(variant, "a_peft"), adapterDir(variant, "b_peft"), adapterDir(variant, "a_mlx"))
	if err != nil {
		t.Fatal(err)
	}
	// scales as PEFT computed them (rank_pattern, alpha_pattern, rslora)
	for id, which := range map[string]string{"a_peft": "a", "b_peft": "b"} {
		mt, _ := m.Host().Mounted(id)
		if len(mt.Adapter.Deltas) != len(g.Scales[which]) {
			t.Errorf("%s: %d modules, PEFT adapted %d", id, len(mt.Adapter.Deltas), len(g.Scales[which]))
		}
		for name, want := range g.Scales[which] {
			d := mt.Adapter.Deltas[lora.Relative(name)]
			if d == nil {
				t.Errorf("%s: module %s missing", id, name)
			} else if math.Abs(d.Scale-want) > 1e-12*want {
				t.Errorf("%s: module %s scale %v, PEFT %v", id, name, d.Scale, want)
			}
		}
	}
	sel := func(ids ...string) *lora.Model { return m.With(lora.Selection{Set: ids}) }
	a := promptLogits(t, sel("a_peft"), g.Prompt)
	compareLogits(t, "adapter a (PEFT)", a, g.LogitsA)
	compareLogits(t, "adapter b (PEFT, rank/alpha patterns, rslora)", promptLogits(t, sel("b_peft"), g.Prompt), g.LogitsB)
	compareLogits(t, "adapters a+b", promptLogits(t, sel("a_peft", "b_peft"), g.Prompt), g.LogitsAB)
	compareLogits(t, "adapters a+b (a in mlx-lm format)", promptLogits(t, sel("a_mlx", "b_peft"), g.Prompt), g.LogitsAB)
	identical(t, "adapter a in mlx-lm format", promptLogits(t, sel("a_mlx"), g.Prompt), a)
	// switching back to the base model rewrote nothing
	compareLogits(t, "base after adapters", promptLogits(t, sel(), g.Prompt), baseLogits(t, variant))
	identical(t, "adapter a again", promptLogits(t, sel("a_peft"), g.Prompt), a)

	greedy(t, "base", sel(), g.Prompt, g.GreedyBase)
	greedy(t, "adapter a", sel("a_peft"), g.Prompt, g.GreedyA)
	greedy(t, "adapter a (mlx-lm)", sel("a_mlx"), g.Prompt, g.GreedyA)
	greedy(t, "adapter b", sel("b_peft"), g.Prompt, g.GreedyB)
	greedy(t, "adapters a+b", sel("a_peft", "b_peft"), g.Prompt, g.GreedyAB)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("live arrays %d → %d: leak", before, after)
	}
}

func TestParityLlama3(t *testing.T) { checkParity(t, "llama3") }
func TestParityQwen3(t *testing.T)  { checkParity(t, "qwen3") }
func TestParityGemma4(t *testing.T) { checkParity(t, "gemma4_dense") }
