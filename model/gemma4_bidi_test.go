package model

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// bidiFixture is the fixture's checkpoint with text_config's
// use_bidirectional_attention set to "vision" (weights linked).
func bidiFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "processor_config.json"} {
		if err := os.Symlink(mustAbs(t, filepath.Join(mmFixture, "f32", f)), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(mmFixture, "f32", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["use_bidirectional_attention"] = "vision"
	out, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGemma4BidirectionalImageMaskMatchesHF: on the fixture with
// use_bidirectional_attention "vision", each image's soft tokens attend to
// one another (each image its own block, on the sliding layers; the
// full-attention layers stay causal, as in transformers 5.17):
// every row's float32 logits within 1e-4 of max|logit| of HF's (sdpa, with
// mm_token_type_ids as Gemma4Processor returns them) for a prompt with two
// images and one with an image and an audio clip, and the greedy
// continuation through the caches equal to HF's generate. A prefill pass
// that cuts a block is an error, not a different answer.
func TestGemma4BidirectionalImageMaskMatchesHF(t *testing.T) {
	g := readMasksGolden(t)
	dir := bidiFixture(t)
	med, err := LoadGemma4Media(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer med.Close()
	if !med.BidirectionalVision {
		t.Fatal("the patched config is not bidirectional")
	}
	lm := loadGemma4(t, dir)
	defer lm.Close()
	for _, name := range []string{"two", "image_audio"} {
		pr, ok := g.Bidi[name]
		if !ok {
			t.Fatalf("no bidi prompt %q", name)
		}
		t.Run(name, func(t *testing.T) {
			sc := tensor.NewScope()
			defer sc.Close()
			media := encodeFiles(t, med, pr.Images, pr.Audio)
			spans, err := med.Tokens.Locate(pr.IDs, media)
			if err != nil {
				t.Fatal(err)
			}
			nb := 0
			for _, s := range spans {
				if s.Bidirectional {
					nb++
				}
			}
			if nb != len(pr.Images) {
				t.Fatalf("%d bidirectional spans for %d images", nb, len(pr.Images))
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
			closeTo(t, "logits", tensor.AsType(lg, tensor.Float32).Float32s(), g.t["bidi_logits_"+name].f32(), 1e-4)

			// the causal mask's logits are far from these: the blocks matter
			pmCausal, err := NewPromptMedia(lm.Backend(), len(pr.IDs), info.Hidden, info.DType, spans, med.Tokens.Pad)
			if err != nil {
				t.Fatal(err)
			}
			defer pmCausal.Free()
			pmCausal.Blocks = nil
			hc, err := pmCausal.Wrap(lm).Forward(idsArray(pr.IDs), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			lc, err := lm.Logits(hc)
			if err != nil {
				t.Fatal(err)
			}
			want, causal := g.t["bidi_logits_"+name].f32(), tensor.AsType(lc, tensor.Float32).Float32s()
			worst := 0.0
			for i := range want {
				worst = max(worst, math.Abs(float64(want[i]-causal[i])))
			}
			if worst < 0.1 {
				t.Fatalf("causal logits within %.3g of the bidirectional ones: the test cannot tell the masks apart", worst)
			}

			if got := greedyOnePass(t, mm, pr.IDs, len(pr.Greedy)); !slices.Equal(got, pr.Greedy) {
				t.Fatalf("greedy %v, HF %v (gaps %v; causal HF %v)", got, pr.Greedy, pr.Gaps, pr.CausalGreedy)
			}

			// a pass ending inside the first image's block
			caches := mm.MakeCaches()
			defer FreeCaches(caches)
			cut := spans[0].Start + 3
			if _, err := mm.Forward(idsArray(pr.IDs[:cut]), caches, nil); !errors.Is(err, tensor.ErrArgument) {
				t.Fatalf("a pass cutting a block: %v", err)
			}
			if c := pm.PrefillChunk(7); c != len(pr.IDs) {
				t.Fatalf("PrefillChunk(7) = %d for a %d-token prompt", c, len(pr.IDs))
			}
		})
	}
}

// TestGemma4CausalModelHasNoBlocks: on the fixture itself (no
// bidirectional attention) images are not blocks, and PrefillChunk keeps
// the chunk.
func TestGemma4CausalModelHasNoBlocks(t *testing.T) {
	med := loadMMMedia(t)
	media := encodeFiles(t, med, []string{"a"}, "")
	if media[0].Bidirectional {
		t.Fatal("an image on a causal model is marked bidirectional")
	}
	_, spans, err := med.Tokens.Expand([]int32{2, med.Tokens.Image, 5}, media)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := NewPromptMedia(nil, 3+media[0].Tokens+1, media[0].Embeds.Dim(1), media[0].Embeds.DType(), spans, med.Tokens.Pad)
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Free()
	if pm.Blocks != nil || pm.PrefillChunk(7) != 7 {
		t.Fatalf("blocks %v, chunk %d", pm.Blocks, pm.PrefillChunk(7))
	}
}
