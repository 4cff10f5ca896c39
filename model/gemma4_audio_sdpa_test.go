package model

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// masksGolden is golden_masks.{json,safetensors}, made by
// tools/oracle/models_gemma4_mm_masks.py from the same fixture: HF under
// attn_implementation="sdpa", and the fixture's weights with
// use_bidirectional_attention "vision".
type masksGolden struct {
	Report map[string]any `json:"report"`
	SDPA   map[string]struct {
		Greedy      []int32   `json:"greedy"`
		EagerGreedy []int32   `json:"eager_greedy"`
		Gaps        []float64 `json:"gaps"`
		DiffEager   float64   `json:"max_abs_diff_vs_eager"`
	} `json:"-"`
	SDPARaw map[string]json.RawMessage `json:"sdpa"`
	Bidi    map[string]struct {
		IDs          []int32   `json:"ids"`
		Images       []string  `json:"images"`
		Audio        string    `json:"audio"`
		Greedy       []int32   `json:"greedy"`
		CausalGreedy []int32   `json:"causal_greedy"`
		Gaps         []float64 `json:"gaps"`
		DiffCausal   float64   `json:"max_abs_diff_vs_causal"`
	} `json:"bidi"`
	t map[string]*mmTensor
}

func readMasksGolden(t testing.TB) *masksGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(mmFixture, "golden_masks.json"))
	if err != nil {
		t.Skipf("no mask goldens: %v", err)
	}
	var g masksGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	g.SDPA = map[string]struct {
		Greedy      []int32   `json:"greedy"`
		EagerGreedy []int32   `json:"eager_greedy"`
		Gaps        []float64 `json:"gaps"`
		DiffEager   float64   `json:"max_abs_diff_vs_eager"`
	}{}
	for k, v := range g.SDPARaw {
		var p struct {
			Greedy      []int32   `json:"greedy"`
			EagerGreedy []int32   `json:"eager_greedy"`
			Gaps        []float64 `json:"gaps"`
			DiffEager   float64   `json:"max_abs_diff_vs_eager"`
		}
		if json.Unmarshal(v, &p) == nil && p.Greedy != nil {
			g.SDPA[k] = p
		}
	}
	b, err := os.ReadFile(filepath.Join(mmFixture, "golden_masks.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	g.t = map[string]*mmTensor{}
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var m mmTensor
		if err := json.Unmarshal(v, &m); err != nil {
			t.Fatal(err)
		}
		m.raw = b[8+int(n)+m.Off[0] : 8+int(n)+m.Off[1]]
		g.t[k] = &m
	}
	return &g
}

// encodeFiles encodes fixture media files through m (images "a", "d";
// audio "w1").
func encodeFiles(t *testing.T, m *Gemma4Media, images []string, audio string) []*Medium {
	t.Helper()
	var out []*Medium
	enc := func(kind MediaKind, file string) {
		data, err := os.ReadFile(filepath.Join(mmFixture, "media", file))
		if err != nil {
			t.Fatal(err)
		}
		e, err := m.Encode(kind, data)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Free)
		out = append(out, e)
	}
	for _, k := range images {
		enc(MediaImage, k+".png")
	}
	if audio != "" {
		enc(MediaAudio, audio+".wav")
	}
	return out
}

// greedyOnePass prefills ids in one pass through caches and decodes n
// tokens greedily.
func greedyOnePass(t *testing.T, mm Model, ids []int32, n int) []int32 {
	t.Helper()
	caches := mm.MakeCaches()
	defer FreeCaches(caches)
	h, err := mm.Forward(idsArray(ids), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := mm.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	last := tensor.AsType(lg, tensor.Float32).Float32s()
	var out []int32
	for range n {
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
	return out
}

// TestGemma4AudioSDPAMatchesHF holds the audio tower as mlxgo runs it
// (the mask as meant) to HF's under attn_implementation="sdpa" (which
// reads the mask as the boolean it is; eager inverts it in transformers
// 5.17): the tower and projection within 1e-5, and the audio and
// image+audio prompts' logits within 1e-4 of max|logit| and greedy
// through the caches equal to HF's generate.
func TestGemma4AudioSDPAMatchesHF(t *testing.T) {
	g := readMasksGolden(t)
	_, j := readMMGolden(t)
	med := loadMMMedia(t)
	if med.Audio == nil {
		t.Fatal("no audio tower")
	}
	sc := tensor.NewScope()
	defer sc.Close()
	tower, err := med.Audio.Tower(mmFeatures(t, med, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "tower", tower.Float32s(), g.t["sdpa_aud_w1_tower"].f32(), 1e-5)
	emb, err := med.Audio.Project(tower)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "embed", emb.Float32s(), g.t["sdpa_aud_w1_embed"].f32(), 1e-5)

	lm := loadGemma4(t, filepath.Join(mmFixture, "f32"))
	defer lm.Close()
	for _, name := range []string{"audio", "both", "image"} {
		pr := j.Prompts[name]
		hf, ok := g.SDPA[name]
		if !ok {
			t.Fatalf("no sdpa golden for %q", name)
		}
		t.Run(name, func(t *testing.T) {
			sc := tensor.NewScope()
			defer sc.Close()
			var imgs []string
			if pr.Image != "" {
				imgs = []string{pr.Image}
			}
			media := encodeFiles(t, med, imgs, pr.Audio)
			spans, err := med.Tokens.Locate(pr.IDs, media)
			if err != nil {
				t.Fatal(err)
			}
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
			closeTo(t, "logits", got, g.t["sdpa_logits_"+name].f32(), 1e-4)
			if out := greedyOnePass(t, mm, pr.IDs, len(hf.Greedy)); !slices.Equal(out, hf.Greedy) {
				t.Fatalf("greedy %v, HF (sdpa) %v (gaps %v)", out, hf.Greedy, hf.Gaps)
			}
			t.Logf("HF sdpa vs eager logits differ by up to %.3g; greedy sdpa %v, eager %v", hf.DiffEager, hf.Greedy, hf.EagerGreedy)
		})
	}
}
