package quant

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// fixtures is the model package's parity fixtures: tiny random models of
// each architecture with HF's logits (model/testdata).
var fixtures = filepath.Join("..", "model", "testdata")

// fixture is the folder of one fixture's checkpoint form ("f32", "bf16").
func fixture(name, form string) string { return filepath.Join(fixtures, name, form) }

// gemma4Variants are the Gemma 4 fixtures.
var gemma4Variants = []string{"gemma4_dense", "gemma4_kv", "gemma4_ple", "gemma4_moe"}

// fixtureGolden is the part of a fixture's golden.json these tests use.
type fixtureGolden struct {
	Prompt    []int32     `json:"prompt"`
	LogitsF32 [][]float64 `json:"logits_f32"`
}

func readFixtureGolden(t *testing.T, fx string) *fixtureGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures, fx, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g fixtureGolden
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Prompt) == 0 {
		t.Fatalf("%s golden: %v", fx, err)
	}
	return &g
}

// fixturePrompt reads the prompt of a parity fixture's golden file.
func fixturePrompt(t *testing.T, fx string) []int32 { return readFixtureGolden(t, fx).Prompt }

// ForEachBackend runs f as one subtest per backend: "cpu" always, and
// "mlx" (MLX through libmlxc), which skips with one line when libmlxc is
// not installed. The backend is the default backend while f runs.
func ForEachBackend(t *testing.T, f func(t *testing.T, be tensor.Backend)) {
	t.Helper()
	t.Run("cpu", func(t *testing.T) {
		be, err := tensor.Open("cpu")
		if err != nil {
			t.Fatal(err)
		}
		withDefault(be, t, f)
	})
	t.Run("mlx", func(t *testing.T) {
		withDefault(mlxtest.OpenOrSkip(t), t, f)
	})
}

func withDefault(be tensor.Backend, t *testing.T, f func(t *testing.T, be tensor.Backend)) {
	prev := tensor.Default()
	tensor.SetDefault(be)
	defer tensor.SetDefault(prev)
	f(t, be)
}

// load loads the checkpoint in dir on the default backend.
func load(t *testing.T, dir string) *model.Loaded {
	t.Helper()
	m, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*model.Loaded)
}

func idsArray(ids []int32) *tensor.Array {
	raw := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return tensor.FromBytes(raw, []int{1, len(ids)}, tensor.Int32)
}

// logitsOf runs the prompt through the model (in chunks through fresh
// caches when chunk > 0, else at once without caches) and returns the
// float32 logits of every position.
func logitsOf(t *testing.T, m model.Model, prompt []int32, chunk int) [][]float32 {
	t.Helper()
	var caches []kv.Cache
	if chunk > 0 {
		caches = m.MakeCaches()
		defer model.FreeCaches(caches)
	} else {
		chunk = len(prompt)
	}
	var rows [][]float32
	for i := 0; i < len(prompt); i += chunk {
		part := prompt[i:min(i+chunk, len(prompt))]
		sc := tensor.NewScope()
		h, err := m.Forward(idsArray(part), caches, nil)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := m.Logits(h)
		if err != nil {
			t.Fatal(err)
		}
		f := tensor.AsType(lg, tensor.Float32).Float32s()
		v := lg.Dim(-1)
		for p := range len(part) {
			rows = append(rows, append([]float32(nil), f[p*v:(p+1)*v]...))
		}
		sc.Close()
	}
	return rows
}

func minCosine(ref [][]float64, got [][]float32) float64 {
	worst := 1.0
	for p, row := range ref {
		var dot, na, nb float64
		for j, x := range row {
			y := float64(got[p][j])
			dot += x * y
			na += x * x
			nb += y * y
		}
		worst = min(worst, dot/math.Sqrt(na*nb))
	}
	return worst
}

func toF64(rows [][]float32) [][]float64 {
	out := make([][]float64, len(rows))
	for i, r := range rows {
		out[i] = f64s(r)
	}
	return out
}

func f64s(a []float32) []float64 {
	out := make([]float64, len(a))
	for i, x := range a {
		out[i] = float64(x)
	}
	return out
}

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range b {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

// llamaTestConfig is a small Llama 3 config for checkpoints written by tests.
var llamaTestConfig = map[string]any{
	"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
	"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
	"vocab_size": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
	"rope_theta": 500000.0, "eos_token_id": []int{2, 3},
	"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}

// writeRandomLlama writes a seeded random float32 Llama checkpoint of
// llamaTestConfig (N(0, std) weights, norms near 1) and returns its folder.
func writeRandomLlama(t *testing.T, std float64) string {
	t.Helper()
	shapes := map[string][]int{
		"model.embed_tokens.weight": {512, 128},
		"model.norm.weight":         {128},
		"lm_head.weight":            {512, 128},
	}
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		shapes[p+"input_layernorm.weight"] = []int{128}
		shapes[p+"post_attention_layernorm.weight"] = []int{128}
		shapes[p+"self_attn.q_proj.weight"] = []int{128, 128}
		shapes[p+"self_attn.k_proj.weight"] = []int{64, 128}
		shapes[p+"self_attn.v_proj.weight"] = []int{64, 128}
		shapes[p+"self_attn.o_proj.weight"] = []int{128, 128}
		shapes[p+"mlp.gate_proj.weight"] = []int{256, 128}
		shapes[p+"mlp.up_proj.weight"] = []int{256, 128}
		shapes[p+"mlp.down_proj.weight"] = []int{128, 256}
	}
	dir := t.TempDir()
	r := rand.New(rand.NewSource(3))
	arrs := map[string]*tensor.Array{}
	for _, name := range slices.Sorted(maps.Keys(shapes)) { // one draw order: the same weights every run
		shape := shapes[name]
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			if len(shape) == 1 {
				v[i] = 1 + float32(0.1*r.NormFloat64())
			} else {
				v[i] = float32(std * r.NormFloat64())
			}
		}
		arrs[name] = tensor.FromFloat32(v, shape, tensor.Float32)
	}
	if err := safetensors.WriteArrays(filepath.Join(dir, "model.safetensors"), arrs, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range arrs {
		a.Free()
	}
	raw, _ := json.Marshal(llamaTestConfig)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
