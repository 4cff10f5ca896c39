package serve

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	mountMMAdapter(t, s, lm, "ad", 5)
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

// mountMMAdapter mounts as id a random rank-4 adapter (from seed) on the
// text model's q_proj and o_proj of the multimodal fixture loaded as lm.
func mountMMAdapter(t *testing.T, s *mmServe, lm *lora.Model, id string, seed int64) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(s.dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ad := &lora.Adapter{Dir: "memory", Format: lora.FormatPEFT, Rank: 4, Scale: 1, Deltas: map[string]*lora.Delta{}}
	r := rand.New(rand.NewSource(seed))
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
	if _, err := lm.Host().Mount(id, ad); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Host().Unmount(id) })
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

// TestAdapterMediaBatchedRows: on the batched lane of a multimodal model
// whose text model is the adapters' model, image and audio requests with
// adapters join the batch as rows (lane "batched") beside rows with
// other adapters, no adapter, and text: sent all at once, each reply and
// its logprobs equal, bit for bit, the same request's alone on the serial
// lane (the towers unadapted, the text model with the row's set there
// too), and the adapters change the replies they are asked for. The same
// image under two adapter sets shares no KV (the prefix cache's namespace
// holds the set as well as the media).
func TestAdapterMediaBatchedRows(t *testing.T) {
	s := newMMServe(t)
	lm, err := lora.Open(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Close() })
	mountMMAdapter(t, s, lm, "ad", 5)
	mountMMAdapter(t, s, lm, "ad2", 9)
	base := lm.With(lora.Selection{})
	mm := &mediaTestModel{Model: generate.Wrap(base, base.Info().Vocab), base: base, media: s.mm.media}
	pr := s.gold.Prompts["image"]
	parts := splitPrompt(pr.IDs)
	png := s.b64(t, pr.Image+".png")
	au := s.gold.Prompts["audio"]
	aparts := splitPrompt(au.IDs)
	wav := s.b64(t, au.Audio+".wav")
	const n = 6
	type ask struct{ kind, adapter string }
	req := func(a ask) map[string]any {
		var content []any
		switch a.kind {
		case "image":
			content = []any{
				map[string]any{"type": "text", "text": parts[0] + " "},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + png}},
				map[string]any{"type": "text", "text": " " + parts[1]}}
		case "audio":
			content = []any{
				map[string]any{"type": "text", "text": aparts[0] + " "},
				map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": wav, "format": "wav"}},
				map[string]any{"type": "text", "text": " " + aparts[len(aparts)-1]}}
		default:
			content = []any{map[string]any{"type": "text", "text": parts[0] + " " + parts[1]}}
		}
		return map[string]any{"model": "gemma4-mm", "max_tokens": n, "temperature": 0, "logprobs": true, "adapter": a.adapter,
			"messages": []any{map[string]any{"role": "user", "content": content}}}
	}
	type reply struct {
		text     string
		logprobs []float64
		lane     string
		cached   int
	}
	read := func(code int, body map[string]any) (reply, error) {
		if code != 200 {
			return reply{}, fmt.Errorf("status %d: %v", code, body)
		}
		ch := body["choices"].([]any)[0].(map[string]any)
		r := reply{text: ch["message"].(map[string]any)["content"].(string)}
		lp, _ := ch["logprobs"].(map[string]any)
		for _, c := range lp["content"].([]any) {
			r.logprobs = append(r.logprobs, c.(map[string]any)["logprob"].(float64))
		}
		u := body["usage"].(map[string]any)
		r.lane, _ = u["lane"].(string)
		d, _ := u["prompt_tokens_details"].(map[string]any)
		c, _ := d["cached_tokens"].(float64)
		r.cached = int(c)
		return r, nil
	}
	asks := []ask{{"image", "ad"}, {"image", "none"}, {"audio", "ad2"}, {"text", "ad"}, {"image", "ad+ad2"}, {"audio", "none"}, {"image", "ad2"}, {"text", "none"}}

	serial := s.cfg
	serial.Model, serial.Adapters, serial.Batch = mm, lm, 1
	_, hs1 := startServer(t, serial)
	want := map[ask]reply{}
	for _, a := range asks {
		code, body := post(t, hs1.URL+"/v1/chat/completions", req(a))
		r, err := read(code, body)
		if err != nil {
			t.Fatalf("%v on the serial lane: %v", a, err)
		}
		want[a] = r
	}
	for _, k := range []string{"image", "audio"} {
		if want[ask{k, "none"}].text == want[ask{k, "ad"}].text && want[ask{k, "none"}].text == want[ask{k, "ad2"}].text {
			t.Fatalf("%s: the adapters do not change the greedy reply (%q): the test cannot tell them apart", k, want[ask{k, "none"}].text)
		}
	}

	batched := s.cfg
	batched.Model, batched.Adapters, batched.Batch = mm, lm, 8
	_, hs := startServer(t, batched)
	// one image under one set, then under another: nothing cached the
	// second time; the first again reuses its prompt
	for i, a := range []ask{{"image", "ad"}, {"image", "ad2"}, {"image", "ad"}} {
		code, body := post(t, hs.URL+"/v1/chat/completions", req(a))
		r, err := read(code, body)
		if err != nil {
			t.Fatalf("%v alone on the batched lane: %v", a, err)
		}
		if r.lane != "batched" || r.text != want[a].text || !slices.Equal(r.logprobs, want[a].logprobs) {
			t.Fatalf("%v alone on the batched lane (%q): %q %v, serial %q %v", a, r.lane, r.text, r.logprobs, want[a].text, want[a].logprobs)
		}
		if (r.cached > 0) != (i == 2) {
			t.Fatalf("request %d (%v): %d cached tokens", i, a, r.cached)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(asks))
	for i, a := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := post(t, hs.URL+"/v1/chat/completions", req(a))
			r, err := read(code, body)
			switch {
			case err != nil:
				errs[i] = err
			case r.lane != "batched":
				errs[i] = fmt.Errorf("%v: lane %q", a, r.lane)
			case r.text != want[a].text || !slices.Equal(r.logprobs, want[a].logprobs):
				errs[i] = fmt.Errorf("%v beside the others: %q %v, alone on the serial lane %q %v", a, r.text, r.logprobs, want[a].text, want[a].logprobs)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
