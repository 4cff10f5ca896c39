package model

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// The gemma4_mm fixture: a tiny random Gemma4ForConditionalGeneration and
// HF 5.17's outputs, from tools/oracle/models_gemma4_mm.py.
var mmFixture = filepath.Join("testdata", "gemma4_mm")

type mmTensor struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Off   [2]int `json:"data_offsets"`
	raw   []byte
}

func (g *mmTensor) f32() []float32 {
	out := make([]float32, len(g.raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(g.raw[4*i:]))
	}
	return out
}

type mmPrompt struct {
	IDs       []int32   `json:"ids"`
	Image     string    `json:"image"`
	Audio     string    `json:"audio"`
	Rows      []int     `json:"rows"`
	Greedy    []int32   `json:"greedy"`
	Gaps      []float64 `json:"gaps"`
	MaxLogit  float64   `json:"max_abs_logit"`
	PromptLen int       `json:"len"`
}

type mmGoldenJSON struct {
	Prompts map[string]mmPrompt       `json:"prompts"`
	Audio   map[string]map[string]any `json:"audio"`
	Images  map[string]map[string]any `json:"images"`
}

func readMMGolden(t testing.TB) (map[string]*mmTensor, *mmGoldenJSON) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mmFixture, "golden.safetensors"))
	if err != nil {
		t.Skipf("no gemma4_mm fixture: %v", err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string]*mmTensor{}
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var g mmTensor
		if err := json.Unmarshal(v, &g); err != nil {
			t.Fatal(err)
		}
		g.raw = b[8+int(n)+g.Off[0] : 8+int(n)+g.Off[1]]
		out[k] = &g
	}
	raw, err := os.ReadFile(filepath.Join(mmFixture, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var j mmGoldenJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		t.Fatal(err)
	}
	return out, &j
}

func loadMMMedia(t testing.TB) *Gemma4Media {
	t.Helper()
	m, err := LoadGemma4Media(filepath.Join(mmFixture, "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func mmImage(t testing.TB, m *Gemma4Media, key string) *media.Gemma4Image {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(mmFixture, "media", key+".png"))
	if err != nil {
		t.Fatal(err)
	}
	rgb, err := media.DecodeImage(data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := media.Gemma4Preprocess(rgb, m.ImageConfig)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// closeTo checks got against want within tol·max|want| (and a floor for
// all-small tensors).
func closeTo(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, HF %d", what, len(got), len(want))
	}
	scale, worst, at := 0.0, 0.0, 0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	t.Logf("%s: max |diff| %.3g (at %d) over max |HF| %.3g", what, worst, at, scale)
	if !(worst <= tol*max(scale, 1e-3)) {
		t.Fatalf("%s: max |diff| %.3g at %d (got %g, HF %g) over %.3g·%.3g", what, worst, at, got[at], want[at], tol, scale)
	}
}

// TestGemma4VisionTowerMatchesHF holds the vision tower and its projection
// to HF's on two images of different grids.
func TestGemma4VisionTowerMatchesHF(t *testing.T) {
	g, _ := readMMGolden(t)
	m := loadMMMedia(t)
	if m.Vision == nil {
		t.Fatal("no vision tower loaded")
	}
	for _, key := range []string{"a", "d"} {
		t.Run(key, func(t *testing.T) {
			img := mmImage(t, m, key)
			sc := tensor.NewScope()
			defer sc.Close()
			tower, err := m.Vision.Tower(img)
			if err != nil {
				t.Fatal(err)
			}
			want := g["vis_"+key+"_tower"]
			if tower.Dim(0) != want.Shape[0] || tower.Dim(1) != want.Shape[1] {
				t.Fatalf("tower %v, HF %v", tower.Shape(), want.Shape)
			}
			if m.Vision.SoftTokens(img) != want.Shape[0] || img.SoftTokens != want.Shape[0] {
				t.Fatalf("soft tokens %d / %d, HF %d", m.Vision.SoftTokens(img), img.SoftTokens, want.Shape[0])
			}
			closeTo(t, "tower", tower.Float32s(), want.f32(), 1e-5)
			emb, err := m.Vision.Project(tower)
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, "embed", emb.Float32s(), g["vis_"+key+"_embed"].f32(), 1e-5)
		})
	}
}

// mmSpans runs the towers a golden prompt names and places their output
// at the prompt's placeholder runs.
func mmSpans(t testing.TB, m *Gemma4Media, pr mmPrompt) []MediaSpan {
	t.Helper()
	var spans []MediaSpan
	start := func(id int32) int {
		for i, v := range pr.IDs {
			if v == id {
				return i
			}
		}
		t.Fatalf("no placeholder %d in the prompt", id)
		return -1
	}
	if pr.Image != "" {
		tower, err := m.Vision.Tower(mmImage(t, m, pr.Image))
		if err != nil {
			t.Fatal(err)
		}
		emb, err := m.Vision.Project(tower)
		if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, MediaSpan{Start: start(m.Tokens.Image), Embeds: emb})
	}
	if pr.Audio != "" {
		emb := mmAudioEmbeds(t, m, pr.Audio)
		spans = append(spans, MediaSpan{Start: start(m.Tokens.Audio), Embeds: emb})
	}
	return spans
}

// mmAudioEmbeds is set by the audio tests' file (nil until the audio
// tower exists).
var mmAudioEmbeds func(t testing.TB, m *Gemma4Media, key string) *tensor.Array

func argmaxRow(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

// TestGemma4MultimodalLogitsMatchHF runs each golden prompt through the
// text model with the towers' embeddings merged (PromptMedia): float32
// logits at HF's recorded rows within 1e-4 of max|logit|, and the greedy
// continuation through the caches (prefill in chunks that split the media
// runs) equal to HF's generate.
func TestGemma4MultimodalLogitsMatchHF(t *testing.T) {
	g, j := readMMGolden(t)
	med := loadMMMedia(t)
	lm := loadGemma4(t, filepath.Join(mmFixture, "f32"))
	defer lm.Close()
	for _, name := range []string{"image", "audio", "both"} {
		pr, ok := j.Prompts[name]
		if !ok {
			t.Fatalf("golden has no %q prompt", name)
		}
		t.Run(name, func(t *testing.T) {
			if pr.Audio != "" && (med.Audio == nil || mmAudioEmbeds == nil) {
				t.Skip("no audio tower yet")
			}
			sc := tensor.NewScope()
			defer sc.Close()
			spans := mmSpans(t, med, pr)
			info := lm.Info()
			pm, err := NewPromptMedia(lm.Backend(), len(pr.IDs), info.Hidden, info.DType, spans, med.Tokens.Pad)
			if err != nil {
				t.Fatal(err)
			}
			defer pm.Free()
			mm := pm.Wrap(lm)
			h, err := mm.Forward(idsArray(pr.IDs), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			lg, err := mm.Logits(h)
			if err != nil {
				t.Fatal(err)
			}
			all := tensor.AsType(lg, tensor.Float32).Float32s()
			v := lg.Dim(-1)
			var got []float32
			for _, r := range pr.Rows {
				got = append(got, all[r*v:(r+1)*v]...)
			}
			closeTo(t, "logits", got, g["logits_"+name].f32(), 1e-4)

			// greedy through the caches, prefill in chunks of 7
			caches := mm.MakeCaches()
			defer FreeCaches(caches)
			var last []float32
			for i := 0; i < len(pr.IDs); i += 7 {
				part := pr.IDs[i:min(i+7, len(pr.IDs))]
				h, err := mm.Forward(idsArray(part), caches, nil)
				if err != nil {
					t.Fatal(err)
				}
				lg, err := mm.Logits(tensor.SliceAxis(h, 1, len(part)-1, len(part)))
				if err != nil {
					t.Fatal(err)
				}
				last = tensor.AsType(lg, tensor.Float32).Float32s()
			}
			var out []int32
			for range pr.Greedy {
				nxt := argmaxRow(last)
				out = append(out, nxt)
				h, err := mm.Forward(idsArray([]int32{nxt}), caches, nil)
				if err != nil {
					t.Fatal(err)
				}
				lg, err := mm.Logits(h)
				if err != nil {
					t.Fatal(err)
				}
				last = tensor.AsType(lg, tensor.Float32).Float32s()
			}
			for i := range out {
				if out[i] != pr.Greedy[i] {
					t.Fatalf("greedy %v, HF %v (gaps %v)", out, pr.Greedy, pr.Gaps)
				}
			}
			if off := caches[0].Offset(); off != len(pr.IDs)+len(pr.Greedy) {
				t.Fatalf("caches at %d", off)
			}
		})
	}
}

var _ = kv.NewKVCache

// TestDenseAttentionMatchesSDPA holds the vision tower's blocked dense
// attention to the fused kernel on a grid larger than one query block,
// with grouped KV heads.
func TestDenseAttentionMatchesSDPA(t *testing.T) {
	sc := tensor.NewScope()
	defer sc.Close()
	q := tensor.Uniform(tensor.Key(1), []int{1, 4, 1100, 8}, -1, 1, tensor.Float32)
	k := tensor.Uniform(tensor.Key(2), []int{1, 2, 1100, 8}, -1, 1, tensor.Float32)
	v := tensor.Uniform(tensor.Key(3), []int{1, 2, 1100, 8}, -1, 1, tensor.Float32)
	var got, want []float32
	if err := tensor.Try(func() {
		got = denseAttention(q, k, v, 2).Float32s()
		want = tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{Scale: 1}).Float32s()
	}); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "attention", got, want, 1e-5)
}
