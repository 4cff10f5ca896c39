package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// gemma4Golden is what tools/oracle/models_gemma4.py records from HF.
type gemma4Golden struct {
	Prompt         []int32     `json:"prompt"`
	Vocab          int         `json:"vocab_size"`
	LogitsF32      [][]float64 `json:"logits_f32"`
	GreedyF32      []int32     `json:"greedy_f32"`
	GreedyF32Gaps  []float64   `json:"greedy_f32_gaps"`
	GreedyBF16     []int32     `json:"greedy_bf16"`
	GreedyBF16Gaps []float64   `json:"greedy_bf16_gaps"`
	Layers         []struct {
		Layer    int    `json:"layer"`
		Type     string `json:"type"`
		HeadDim  int    `json:"head_dim"`
		QOut     int    `json:"q_out"`
		KOut     int    `json:"k_out"`
		HasV     bool   `json:"has_v"`
		KVShared bool   `json:"kv_shared"`
		MLPInter int    `json:"mlp_inter"`
	} `json:"layers"`
}

var gemma4Variants = []string{"gemma4_dense", "gemma4_kv", "gemma4_ple", "gemma4_moe"}

func readGemma4Golden(t *testing.T, variant string) *gemma4Golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", variant, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g gemma4Golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return &g
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
func logitsOf(t *testing.T, m Model, prompt []int32, chunk int) [][]float32 {
	t.Helper()
	var caches []kv.Cache
	if chunk > 0 {
		caches = m.MakeCaches()
		defer FreeCaches(caches)
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
		f := tensor.AsType(lg, tensor.Float32)
		raw := f.Bytes()
		v := lg.Dim(-1)
		for p := range len(part) {
			row := make([]float32, v)
			for j := range row {
				row[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(p*v+j):]))
			}
			rows = append(rows, row)
		}
		sc.Close()
	}
	return rows
}

func loadGemma4(t *testing.T, dir string) *Loaded {
	t.Helper()
	m, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*Loaded)
}

// TestGemma4Config checks our reading of each fixture's config against
// the attention and MLP shapes transformers built from it.
func TestGemma4Config(t *testing.T) {
	for _, v := range gemma4Variants {
		t.Run(v, func(t *testing.T) {
			g := readGemma4Golden(t, v)
			c, err := ReadConfig(filepath.Join("testdata", v, "f32"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := parseGemma4Config(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Layers) != cfg.Layers {
				t.Fatalf("%d layers, HF built %d", cfg.Layers, len(g.Layers))
			}
			for i, want := range g.Layers {
				l := cfg.layer(i)
				kOut := 0
				if !l.Shared {
					kOut = l.KVHeads * l.HeadDim
				}
				hasV := !l.Shared && !l.KEqV
				if l.Type != want.Type || l.HeadDim != want.HeadDim || cfg.Heads*l.HeadDim != want.QOut || kOut != want.KOut ||
					hasV != want.HasV || l.Shared != want.KVShared || l.MLPWidth != want.MLPInter {
					t.Errorf("layer %d: got %+v (k out %d, has v %v), HF %+v", i, l, kOut, hasV, want)
				}
			}
		})
	}
}

// TestGemma4Parity checks float32 logits against HF's at every prompt
// position (prompt longer than the sliding window), both in one pass
// without caches and in cached chunks smaller than the window, and HF's
// greedy continuation decoded token by token through the caches.
func TestGemma4Parity(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, be tensor.Backend) { gemma4Parity(t, be) })
}

// gemma4Parity runs TestGemma4Parity's checks on the default backend be.
func gemma4Parity(t *testing.T, be tensor.Backend) {
	for _, v := range gemma4Variants {
		t.Run(v, func(t *testing.T) {
			g := readGemma4Golden(t, v)
			live := tensor.LiveArrays()
			m := loadGemma4(t, filepath.Join("testdata", v, "f32"))
			if m.w.Backend() != be {
				t.Fatalf("weights on %s, want %s", m.w.Backend().Name(), be.Name())
			}
			if un := m.w.Unused(); len(un) > 0 {
				t.Errorf("checkpoint tensors never loaded: %v", un)
			}
			var maxRef float64
			for _, row := range g.LogitsF32 {
				for _, x := range row {
					maxRef = max(maxRef, math.Abs(x))
				}
			}
			tol := 1e-4 * maxRef
			for _, chunk := range []int{0, 5} {
				got := logitsOf(t, m, g.Prompt, chunk)
				worst := 0.0
				for p, row := range g.LogitsF32 {
					for j, x := range row {
						worst = max(worst, math.Abs(float64(got[p][j])-x))
					}
				}
				t.Logf("chunk %d: max |logit - HF| = %.3g (tolerance %.3g, max |logit| %.3g)", chunk, worst, tol, maxRef)
				if worst > tol {
					t.Errorf("chunk %d: max |logit - HF| = %g > %g", chunk, worst, tol)
				}
			}
			out, err := Greedy(m, g.Prompt, len(g.GreedyF32), 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g.GreedyF32 {
				if i >= len(out) || out[i] != g.GreedyF32[i] {
					t.Fatalf("greedy f32 diverges at %d:\n got %v\nwant %v", i, out, g.GreedyF32)
				}
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if d := tensor.LiveArrays() - live; d != 0 {
				t.Errorf("%d arrays leaked", d)
			}
		})
	}
}

// TestGemma4BF16 checks the bfloat16 checkpoints against HF's bfloat16
// run. Both differ from exact arithmetic by rounding at different points,
// so the prompt logits must agree with HF's bfloat16 logits about as well
// as HF's bfloat16 logits agree with its float32 ones (within twice that
// distance), and greedy decoding must match HF's bfloat16 tokens up to the
// first step whose top two HF logits are within 0.05 of each other (less
// than one bfloat16 step at these magnitudes: a coin flip for either side).
func TestGemma4BF16(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, be tensor.Backend) { gemma4BF16(t, be) })
}

// gemma4BF16 runs TestGemma4BF16's checks on the default backend be.
func gemma4BF16(t *testing.T, be tensor.Backend) {
	for _, v := range gemma4Variants {
		t.Run(v, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", v, "golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var gb struct {
				LogitsBF16 [][]float64 `json:"logits_bf16"`
			}
			if err := json.Unmarshal(raw, &gb); err != nil {
				t.Fatal(err)
			}
			g := readGemma4Golden(t, v)
			m := loadGemma4(t, filepath.Join("testdata", v, "bf16"))
			defer m.Close()
			if m.w.Backend() != be {
				t.Fatalf("weights on %s, want %s", m.w.Backend().Name(), be.Name())
			}
			if m.Info().DType != tensor.BFloat16 {
				t.Fatalf("dtype %s", m.Info().DType)
			}
			got := logitsOf(t, m, g.Prompt, 5)
			var ours, hfs float64
			for p, row := range gb.LogitsBF16 {
				for j, x := range row {
					ours = max(ours, math.Abs(float64(got[p][j])-x))
					hfs = max(hfs, math.Abs(g.LogitsF32[p][j]-x))
				}
			}
			t.Logf("max |logit - HF bf16| = %.3g; HF's own bf16 vs f32: %.3g", ours, hfs)
			if ours > 2*hfs {
				t.Errorf("bf16 logits differ from HF's by %.3g, over twice HF's own bf16 error %.3g", ours, hfs)
			}
			out, err := Greedy(m, g.Prompt, len(g.GreedyBF16), 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := len(g.GreedyBF16)
			for i, gap := range g.GreedyBF16Gaps {
				if gap < 0.05 {
					n = i
					break
				}
			}
			same := 0
			for same < len(out) && same < len(g.GreedyBF16) && out[same] == g.GreedyBF16[same] {
				same++
			}
			t.Logf("greedy bf16: first %d of %d tokens identical to HF's (HF near-tie at step %d)", same, len(g.GreedyBF16), n)
			if same < n {
				t.Fatalf("greedy bf16 diverges at %d before HF's first near-tie at %d:\n got %v\nwant %v", same, n, out, g.GreedyBF16)
			}
		})
	}
}

// fixturePrompt reads the prompt of a parity fixture's golden file.
func fixturePrompt(t *testing.T, fx string) []int32 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", fx, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompt []int32 `json:"prompt"`
	}
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Prompt) == 0 {
		t.Fatalf("%s golden: %v", fx, err)
	}
	return g.Prompt
}

// TestGemma4EmbeddingsInput checks the multimodal hook: hidden states
// computed from precomputed (already scaled) embeddings equal those from
// the ids, and a mask selecting no position leaves the ids' embeddings.
func TestGemma4EmbeddingsInput(t *testing.T) {
	g := readGemma4Golden(t, "gemma4_ple")
	m := loadGemma4(t, filepath.Join("testdata", "gemma4_ple", "f32"))
	defer m.Close()
	sc := tensor.NewScope()
	defer sc.Close()
	ids := idsArray(g.Prompt)
	arch := m.arch.(*Gemma4)
	emb := tensor.MulScalar(arch.Embed.Forward(ids), arch.embedScale)
	ref, err := m.Forward(ids, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	none := tensor.FromBools(make([]bool, len(g.Prompt)), []int{1, len(g.Prompt)})
	zeros := tensor.ZerosLike(emb)
	for _, opts := range []*ForwardOptions{{Embeddings: emb}, {Embeddings: zeros, EmbedMask: none}} {
		h, err := m.Forward(ids, nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		d := tensor.Max(tensor.Abs(tensor.Sub(h, ref)), nil, false)
		if v := math.Float32frombits(binary.LittleEndian.Uint32(d.Bytes())); v != 0 {
			t.Errorf("hidden states differ by %g", v)
		}
	}
	if _, err := m.Forward(ids, nil, &ForwardOptions{Embeddings: tensor.Zeros([]int{1, 2, 3}, tensor.Float32)}); err == nil {
		t.Error("mis-shaped embeddings accepted")
	}
}
