package serve

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// TestAdapterMediaRequest: on a multimodal Gemma 4 loaded through lora,
// an image request with an adapter runs the towers unadapted and the
// text model with the adapter: its reply equals the library's generation
// on the adapter's view with the same media, and differs from the
// reply without the adapter (which equals the base view's).
func TestAdapterMediaRequest(t *testing.T) {
	s := newMMServe(t)
	lm, err := lora.Open(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Close() })
	// a random rank-4 adapter on the text model's q_proj and o_proj
	f, err := safetensors.Open(filepath.Join(s.dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ad := &lora.Adapter{Dir: "memory", Format: lora.FormatPEFT, Rank: 4, Scale: 1, Deltas: map[string]*lora.Delta{}}
	r := rand.New(rand.NewSource(5))
	rnd := func(shape ...int) *tensor.Array {
		v := make([]float32, shape[0]*shape[1])
		for i := range v {
			v[i] = float32(0.3 * r.NormFloat64())
		}
		a := tensor.FromFloat32(v, shape, tensor.Float32)
		tensor.Detach(a)
		return a
	}
	re := regexp.MustCompile(`language_model\..*layers\.\d+\.self_attn\.(q|o)_proj\.weight$`)
	for _, n := range f.Names() {
		if !re.MatchString(n) {
			continue
		}
		info, _ := f.Info(n)
		out, in := info.Shape[0], info.Shape[1]
		mod := strings.TrimSuffix(n, ".weight")
		ad.Deltas[lora.Relative(mod)] = &lora.Delta{Name: mod, A: rnd(4, in), B: rnd(out, 4), Scale: 1, Rank: 4, In: in, Out: out}
	}
	f.Close()
	if len(ad.Deltas) == 0 {
		t.Fatal("the fixture has no text-model q_proj/o_proj")
	}
	t.Cleanup(ad.Free)
	if _, err := lm.Host().Mount("ad", ad); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Host().Unmount("ad") })
	base := lm.With(lora.Selection{})
	mm := &mediaTestModel{Model: generate.Wrap(base, base.Info().Vocab), base: base, media: s.mm.media}
	cfg := s.cfg
	cfg.Model, cfg.Adapters, cfg.Batch = mm, lm, 1
	_, hs := startServer(t, cfg)

	pr := s.gold.Prompts["image"]
	parts := splitPrompt(pr.IDs)
	png := s.b64(t, pr.Image+".png")
	ask := func(adapter string) string {
		t.Helper()
		code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{
			"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0, "adapter": adapter,
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": parts[0] + " "},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + png}},
				map[string]any{"type": "text", "text": " " + parts[1]},
			}}}})
		return chatText(t, code, body)
	}
	data, err := os.ReadFile(filepath.Join(mmFixture, "media", pr.Image+".png"))
	if err != nil {
		t.Fatal(err)
	}
	med, err := s.mm.media.Encode(model.MediaImage, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(med.Free)
	// the library's run of the same expanded prompt through a view
	direct := func(m model.Model) string {
		t.Helper()
		md := s.mm.media
		var prompt []int32
		for _, id := range pr.IDs {
			if id >= 250 && id != 250 { // the expansion writes the run's markers again
				continue
			}
			prompt = append(prompt, id)
		}
		ids, spans, err := md.Tokens.Expand(dedupImage(prompt), []*model.Medium{med})
		if err != nil {
			t.Fatal(err)
		}
		info := m.Info()
		pm, err := model.NewPromptMedia(nil, len(ids), info.Hidden, info.DType, spans, md.Tokens.Pad)
		if err != nil {
			t.Fatal(err)
		}
		defer pm.Free()
		st, err := generate.Generate(context.Background(), generate.Wrap(pm.Wrap(m), info.Vocab), ids, &generate.Options{MaxTokens: len(pr.Greedy)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var out []int
		for tk, err := range st.Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, int(tk.ID))
		}
		return s.tok.Decode(out, false)
	}
	wantBase, wantAd := direct(base), direct(lm.With(lora.Selection{Set: []string{"ad"}}))
	if wantBase == wantAd {
		t.Fatalf("the adapter does not change the image prompt's greedy reply (%q)", wantBase)
	}
	if got := ask("none"); got != wantBase {
		t.Errorf("image, no adapter: %q, library %q", got, wantBase)
	}
	if got := ask("ad"); got != wantAd {
		t.Errorf("image with adapter ad: %q, library on the adapter's view %q", got, wantAd)
	}
	// a media model that is not a view of the adapters' model takes no
	// adapters with media: 400, before the towers run
	cfg2 := s.cfg
	cfg2.Adapters, cfg2.Batch = lm, 1
	_, hs2 := startServer(t, cfg2)
	code, body := post(t, hs2.URL+"/v1/chat/completions", map[string]any{
		"model": "gemma4-mm", "max_tokens": 2, "adapter": "ad",
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + png}},
		}}}})
	if e, _ := body["error"].(map[string]any); code != 400 || e["code"] != "adapter_unsupported" {
		t.Errorf("image with an adapter on a media model apart from the adapters' model: %d %v, want 400 adapter_unsupported", code, body)
	}
	if code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{
		"model": "gemma4-mm", "max_tokens": 2, "adapter": "nope",
		"messages": []any{map[string]any{"role": "user", "content": "t5 t6"}}}); code != 400 {
		t.Errorf("unknown adapter with a media model: %d %v, want 400", code, body)
	}
}

// dedupImage keeps one image placeholder per run of them (the golden
// prompt holds the expanded run; Expand wants one placeholder a medium).
func dedupImage(ids []int32) []int32 {
	var out []int32
	for i, id := range ids {
		if id == 250 && i > 0 && ids[i-1] == 250 {
			continue
		}
		out = append(out, id)
	}
	return out
}
