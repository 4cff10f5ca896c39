package demo

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// golden is what tools/demo-model/train.py records from HF transformers
// on the saved bf16 folder: per prompt, its ids, HF's greedy tokens (and
// top-2 gaps) computed in bfloat16 and in float32 on the same bf16
// weights, and the logits at the prompt's last position.
type golden struct {
	Transformers string           `json:"transformers_version"`
	ChatMessages []map[string]any `json:"chat_messages"`
	ChatText     string           `json:"chat_text"`
	NewTokens    int              `json:"new_tokens"`
	Prompts      []struct {
		Text           string    `json:"text"`
		AddSpecial     bool      `json:"add_special"`
		IDs            []int32   `json:"ids"`
		GreedyBF16     []int32   `json:"greedy_bf16"`
		GreedyBF16Gaps []float64 `json:"greedy_bf16_gaps"`
		GreedyBF16Text string    `json:"greedy_bf16_text"`
		GreedyF32      []int32   `json:"greedy_f32"`
		GreedyF32Gaps  []float64 `json:"greedy_f32_gaps"`
		LogitsBF16     []float64 `json:"logits_bf16_last"`
		LogitsF32      []float64 `json:"logits_f32_last"`
	} `json:"prompts"`
}

func readGolden(t *testing.T) *golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Prompts) < 5 {
		t.Fatalf("golden has %d prompts", len(g.Prompts))
	}
	return &g
}

// cacheDir points the package's cache at a fresh temp folder.
func cacheDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Setenv(CacheEnv, d)
	return d
}

func load(t *testing.T, dir string) model.Model {
	t.Helper()
	m, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// lastLogits runs the prompt and returns the logits at its last position.
func lastLogits(t *testing.T, m model.Model, ids []int32) []float32 {
	t.Helper()
	sc := tensor.NewScope()
	defer sc.Close()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	raw := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	h, err := m.Forward(tensor.FromBytes(raw, []int{1, len(ids)}, tensor.Int32), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	b := tensor.AsType(lg, tensor.Float32).Bytes()
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func maxAbs(a []float32, b []float64) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

func f64s(a []float32) []float64 {
	out := make([]float64, len(a))
	for i, x := range a {
		out[i] = float64(x)
	}
	return out
}

// agree returns how many leading tokens got and want share, and the first
// step at which HF's top two logits were closer than tie (len(want) if
// none): before that step, a different argmax is a real divergence.
func agree(got, want []int32, gaps []float64, tie float64) (same, firstTie int) {
	for same < len(got) && same < len(want) && got[same] == want[same] {
		same++
	}
	firstTie = len(want)
	for i, g := range gaps {
		if g < tie {
			firstTie = i
			break
		}
	}
	return same, firstTie
}

// TestMaterialize checks that both forms land in the cache once, keyed by
// hash, byte-identical to the embedded files, and are repaired when a
// file goes missing or is truncated.
func TestMaterialize(t *testing.T) {
	root := cacheDir(t)
	for _, form := range Forms() {
		dir, err := Dir(form)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := Hash(form)
		if want := filepath.Join(root, "demo-"+form+"-"+h); dir != want {
			t.Fatalf("%s: dir %s, want %s", form, dir, want)
		}
		sub, _ := FS(form)
		names, _ := fs.Glob(sub, "*")
		if len(names) < 5 {
			t.Fatalf("%s: only %v embedded", form, names)
		}
		for _, n := range names {
			want, _ := fs.ReadFile(sub, n)
			got, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s/%s differs from the embedded file (%v)", form, n, err)
			}
		}
		st, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
		mt := st.ModTime()
		again, err := Dir(form)
		if err != nil || again != dir {
			t.Fatalf("second Dir: %s, %v", again, err)
		}
		if st2, _ := os.Stat(filepath.Join(dir, "model.safetensors")); !st2.ModTime().Equal(mt) {
			t.Fatalf("%s rewritten on the second call", form)
		}
		// damage: a truncated weight file and a missing tokenizer
		if err := os.Truncate(filepath.Join(dir, "model.safetensors"), 10); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Fatal(err)
		}
		if _, err := Dir(form); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"model.safetensors", "tokenizer.json"} {
			want, _ := fs.ReadFile(sub, n)
			got, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s/%s not repaired (%v)", form, n, err)
			}
		}
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 2 {
		t.Fatalf("cache holds %d entries, want the 2 forms and no leftovers", len(ents))
	}
	if _, err := Dir("f16"); err == nil {
		t.Fatal("unknown form accepted")
	}
	b, _ := Size(BF16)
	q, _ := Size(Q4)
	t.Logf("bf16 %.2f MB, q4 %.2f MB", float64(b)/1e6, float64(q)/1e6)
	if b+q > 20e6 || q*2 > b {
		t.Fatalf("sizes bf16 %d q4 %d: over the 20 MB budget or q4 not quantized", b, q)
	}
}

// TestTokenizer checks mlxgo's tokenizer against HF's on the demo folder:
// the prompt ids, the decoded greedy text and the chat template.
func TestTokenizer(t *testing.T) {
	cacheDir(t)
	g := readGolden(t)
	dir, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range g.Prompts {
		ids := tok.Encode(p.Text, p.AddSpecial)
		if len(ids) != len(p.IDs) {
			t.Fatalf("%q: %v, HF %v", p.Text, ids, p.IDs)
		}
		for i := range ids {
			if int32(ids[i]) != p.IDs[i] {
				t.Fatalf("%q: %v, HF %v", p.Text, ids, p.IDs)
			}
		}
		out := make([]int, len(p.GreedyBF16))
		for i, v := range p.GreedyBF16 {
			out[i] = int(v)
		}
		if s := tok.Decode(out, false); s != p.GreedyBF16Text {
			t.Errorf("decode: %q, HF %q", s, p.GreedyBF16Text)
		}
	}
	ct, err := tok.ChatTemplate("")
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]any, len(g.ChatMessages))
	for i, m := range g.ChatMessages {
		msgs[i] = m
	}
	s, err := ct.Render(tokenizer.ChatRequest{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if s != g.ChatText {
		t.Fatalf("chat template: %q, HF %q", s, g.ChatText)
	}
}

// TestGreedyBF16 is the parity check on the shipped bf16 model: logits at
// each prompt's end within a few bfloat16 steps of HF's (cosine ≥ 0.999),
// and greedy tokens identical to HF's bfloat16 ones up to HF's first
// near-tie. The logits are soft-capped at 30, where a bfloat16 step is
// 0.125, so two candidates within 0.25 of each other are a coin flip for
// either implementation's rounding.
func TestGreedyBF16(t *testing.T) {
	cacheDir(t)
	g := readGolden(t)
	dir, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	live := tensor.LiveArrays()
	m := load(t, dir)
	if m.Info().DType != tensor.BFloat16 {
		t.Fatalf("dtype %s", m.Info().DType)
	}
	checked := 0
	for _, p := range g.Prompts {
		lg := lastLogits(t, m, p.IDs)
		cos, d, dHF := cosine(lg, p.LogitsBF16), maxAbs(lg, p.LogitsBF16), 0.0
		for i := range p.LogitsBF16 {
			dHF = max(dHF, math.Abs(p.LogitsBF16[i]-p.LogitsF32[i]))
		}
		out, err := model.Greedy(m, p.IDs, len(p.GreedyBF16), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		same, tie := agree(out, p.GreedyBF16, p.GreedyBF16Gaps, 0.25)
		forced := checkForced(t, fmt.Sprintf("%d-token prompt, teacher-forced", len(p.IDs)),
			forcedArgmax(t, m, p.IDs, p.GreedyBF16), p.GreedyBF16, p.GreedyBF16Gaps, 0.25)
		checked += forced
		t.Logf("%3d-token prompt: logits cos %.6f max|Δ| %.3f (HF bf16 vs f32 %.3f); greedy %d/%d same, HF near-tie at %d; teacher-forced argmax equal at all %d steps with gap ≥ 0.25",
			len(p.IDs), cos, d, dHF, same, len(p.GreedyBF16), tie, forced)
		if cos < 0.999 || d > 2*dHF+0.25 {
			t.Errorf("logits: cosine %.6f, max diff %.3f", cos, d)
		}
		if same < tie {
			t.Errorf("greedy diverges at %d before HF's first near-tie at %d:\n got %v\nwant %v", same, tie, out, p.GreedyBF16)
		}
	}
	// near-ties end free-running comparisons early (this model is not
	// overconfident); teacher forcing keeps comparing after them
	if checked < 100 {
		t.Errorf("only %d teacher-forced steps compared", checked)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tensor.LiveArrays(); n > live {
		t.Errorf("%d arrays leaked", n-live)
	}
}

// TestGreedyF32 runs the shipped bf16 weights in float32 (converted with
// mlxgo convert) against HF's float32 run on the same weights: greedy
// must match up to HF's first top-2 gap under 0.01, far above float32
// noise, and logits must agree to 1e-3.
func TestGreedyF32(t *testing.T) {
	cacheDir(t)
	g := readGolden(t)
	src, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "f32")
	if err := model.Convert(src, dst, model.ConvertOptions{DType: tensor.Float32}); err != nil {
		t.Fatal(err)
	}
	m := load(t, dst)
	defer m.Close()
	if m.Info().DType != tensor.Float32 {
		t.Fatalf("dtype %s", m.Info().DType)
	}
	total := 0
	for _, p := range g.Prompts {
		lg := lastLogits(t, m, p.IDs)
		if d := maxAbs(lg, p.LogitsF32); d > 1e-3 {
			t.Errorf("%d-token prompt: f32 logits differ from HF's by %.2g", len(p.IDs), d)
		}
		out, err := model.Greedy(m, p.IDs, len(p.GreedyF32), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		same, tie := agree(out, p.GreedyF32, p.GreedyF32Gaps, 0.01)
		total += min(same, tie)
		t.Logf("%3d-token prompt: greedy %d/%d same, HF near-tie at %d", len(p.IDs), same, len(p.GreedyF32), tie)
		if same < tie {
			t.Errorf("greedy diverges at %d before HF's first near-tie at %d:\n got %v\nwant %v", same, tie, out, p.GreedyF32)
		}
	}
	if total < 100 {
		t.Errorf("only %d greedy tokens compared before near-ties", total)
	}
}

// dequantize writes a float32 copy of the quantized checkpoint in dir
// (model.Dequantize): the float model that the 4-bit one must reproduce.
// The float32 path is itself checked against HF by TestGreedyF32.
func dequantize(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	if err := model.Dequantize(dir, out, tensor.Float32); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQuantized is the 4-bit parity check. Its reference is the float32
// model of the dequantized weights (what HF computes on them, since the
// float32 path matches HF's): the 4-bit model's logits must keep cosine
// ≥ 0.999 with it and its greedy tokens must match up to the reference's
// first near-tie. Against the bf16 model (not the reference: it lacks the
// quantization error) the cosine must stay ≥ 0.97; it is logged.
func TestQuantized(t *testing.T) {
	cacheDir(t)
	g := readGolden(t)
	qdir, err := QuantizedPath()
	if err != nil {
		t.Fatal(err)
	}
	bdir, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	var qc struct {
		Q struct {
			Group int `json:"group_size"`
			Bits  int `json:"bits"`
		} `json:"quantization"`
	}
	raw, err := os.ReadFile(filepath.Join(qdir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &qc); err != nil || qc.Q.Bits != 4 || qc.Q.Group != 64 {
		t.Fatalf("q4 config.json quantization %+v (%v)", qc.Q, err)
	}
	q := load(t, qdir)
	defer q.Close()
	b := load(t, bdir)
	defer b.Close()
	ref := load(t, dequantize(t, qdir))
	defer ref.Close()
	total := 0
	for _, p := range g.Prompts {
		lq := lastLogits(t, q, p.IDs)
		lr := f64s(lastLogits(t, ref, p.IDs))
		cosRef := cosine(lq, lr)
		cosBF := cosine(lq, f64s(lastLogits(t, b, p.IDs)))
		// reference greedy and its gaps
		want, err := model.Greedy(ref, p.IDs, 16, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		gaps := refGaps(t, ref, p.IDs, want)
		out, err := model.Greedy(q, p.IDs, 16, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		same, tie := agree(out, want, gaps, 0.25)
		total += checkForced(t, fmt.Sprintf("%d-token prompt, teacher-forced", len(p.IDs)), forcedArgmax(t, q, p.IDs, want), want, gaps, 0.25)
		t.Logf("%3d-token prompt: cosine vs dequantized f32 %.6f, vs bf16 %.4f; greedy %d/16 same as the reference (near-tie at %d)",
			len(p.IDs), cosRef, cosBF, same, tie)
		if cosRef < 0.999 {
			t.Errorf("%d-token prompt: 4-bit logits cosine %.5f with the dequantized reference", len(p.IDs), cosRef)
		}
		if cosBF < 0.97 {
			t.Errorf("%d-token prompt: 4-bit logits cosine %.4f with bf16", len(p.IDs), cosBF)
		}
		if same < tie {
			t.Errorf("greedy diverges at %d before the reference's first near-tie at %d:\n got %v\nwant %v", same, tie, out, want)
		}
	}
	if total < 40 {
		t.Errorf("only %d teacher-forced steps compared with the reference", total)
	}
}

// refGaps returns the top-2 logit gap before each greedy token of seq.
func refGaps(t *testing.T, m model.Model, prompt, seq []int32) []float64 {
	t.Helper()
	gaps := make([]float64, len(seq))
	ids := append([]int32(nil), prompt...)
	for i := range seq {
		lg := lastLogits(t, m, ids)
		a, b := math.Inf(-1), math.Inf(-1)
		for _, x := range lg {
			v := float64(x)
			if v > a {
				a, b = v, a
			} else if v > b {
				b = v
			}
		}
		gaps[i] = a - b
		ids = append(ids, seq[i])
	}
	return gaps
}

// forcedArgmax feeds prompt and then seq one token at a time through
// fresh caches (teacher forcing) and returns the argmax before each token
// of seq: how the model would continue the reference's own text at every
// step, so one early near-tie does not end the comparison.
func forcedArgmax(t *testing.T, m model.Model, prompt, seq []int32) []int32 {
	t.Helper()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	out := make([]int32, len(seq))
	next := prompt
	for i := range seq {
		func() {
			sc := tensor.NewScope()
			defer sc.Close()
			h, err := m.Forward(tensor.FromInt32(next, []int{1, len(next)}), caches, nil)
			if err != nil {
				t.Fatal(err)
			}
			lg, err := m.Logits(tensor.SliceAxis(h, 1, len(next)-1, len(next)))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = tensor.AsType(tensor.Argmax(lg, -1, false), tensor.Int32).Int32s()[0]
		}()
		next = seq[i : i+1]
	}
	return out
}

// checkForced compares teacher-forced argmaxes with the reference's
// greedy tokens at every step whose reference top-2 gap is at least tol,
// reporting each disagreement; it returns how many steps were compared.
func checkForced(t *testing.T, what string, got, want []int32, gaps []float64, tol float64) int {
	t.Helper()
	n := 0
	for i := range want {
		if gaps[i] < tol {
			continue
		}
		n++
		if got[i] != want[i] {
			t.Errorf("%s: step %d (reference gap %.3f): argmax %d, reference %d", what, i, gaps[i], got[i], want[i])
		}
	}
	return n
}
