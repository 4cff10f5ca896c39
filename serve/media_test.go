package serve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// mmFixture is the tiny Gemma 4 with vision and audio towers made by
// tools/oracle/models_gemma4_mm.py (no tokenizer: the test writes one).
var mmFixture = filepath.Join("..", "model", "testdata", "gemma4_mm")

// mediaTestModel is a serve.MediaModel over the fixture.
type mediaTestModel struct {
	generate.Model
	base  model.Model
	media *model.Gemma4Media
}

func (m *mediaTestModel) Media() *model.Gemma4Media { return m.media }
func (m *mediaTestModel) Base() model.Model         { return m.base }

type mmServe struct {
	dir  string
	tok  *tokenizer.Tokenizer
	mm   *mediaTestModel
	cfg  Config
	gold struct {
		Prompts map[string]struct {
			IDs    []int32 `json:"ids"`
			Image  string  `json:"image"`
			Audio  string  `json:"audio"`
			Greedy []int   `json:"greedy"`
		} `json:"prompts"`
	}
}

// newMMServe copies the fixture's checkpoint into a folder with a
// word-level tokenizer over its 256 ids ("t0" … "t249", the special
// tokens at 250–255 as the fixture's config numbers them) and a chat
// template that writes BOS and the messages' content.
func newMMServe(t *testing.T) *mmServe {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(mmFixture, "golden.json"))
	if err != nil {
		t.Skipf("no gemma4_mm fixture: %v", err)
	}
	s := &mmServe{dir: t.TempDir()}
	if err := json.Unmarshal(raw, &s.gold); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "processor_config.json"} {
		b, err := os.ReadFile(filepath.Join(mmFixture, "f32", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vocab := map[string]int{"<pad>": 0, "<eos>": 1, "<bos>": 2}
	for i := 3; i < 250; i++ {
		vocab[fmt.Sprintf("t%d", i)] = i
	}
	special := []string{"<|image|>", "<|audio|>", "<boi>", "<eoi>", "<boa>", "<eoa>"}
	var added []map[string]any
	for i, name := range append([]string{"<pad>", "<eos>", "<bos>"}, special...) {
		id := i
		if i >= 3 {
			id = 250 + i - 3
			vocab[name] = id
		}
		added = append(added, map[string]any{"id": id, "content": name, "special": true, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false})
	}
	tj := map[string]any{"version": "1.0", "added_tokens": added, "pre_tokenizer": map[string]any{"type": "WhitespaceSplit"},
		"model":   map[string]any{"type": "WordLevel", "vocab": vocab, "unk_token": "<pad>"},
		"decoder": map[string]any{"type": "Fuse"}}
	write := func(name string, v any) {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", tj)
	write("tokenizer_config.json", map[string]any{"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
		"chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"})
	m, err := model.Load(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	md, err := model.LoadGemma4Media(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { md.Close() })
	if s.tok, err = tokenizer.Load(s.dir); err != nil {
		t.Fatal(err)
	}
	tmpl, err := s.tok.ChatTemplate("")
	if err != nil {
		t.Fatal(err)
	}
	s.mm = &mediaTestModel{Model: generate.Wrap(m, m.Info().Vocab), base: m, media: md}
	s.cfg = Config{Model: s.mm, ModelID: "gemma4-mm", Tokenizer: s.tok, Template: tmpl, ContextLength: 4096,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return s
}

func (s *mmServe) b64(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mmFixture, "media", file))
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// words spells ids as the test tokenizer's words.
func words(ids []int32) string {
	w := make([]string, len(ids))
	for i, id := range ids {
		w[i] = fmt.Sprintf("t%d", id)
	}
	return strings.Join(w, " ")
}

// splitPrompt cuts a golden prompt (BOS, text ids, one or two media runs,
// text ids) at its media runs: the text pieces between them.
func splitPrompt(ids []int32) []string {
	var parts []string
	var cur []int32
	for i := 1; i < len(ids); i++ { // ids[0] is BOS: the template writes it
		switch id := ids[i]; {
		case id >= 250:
			if id == 252 || id == 254 { // a run opens: flush the text before it
				parts = append(parts, words(cur))
				cur = nil
			}
		default:
			cur = append(cur, id)
		}
	}
	return append(parts, words(cur))
}

// direct generates greedily through the library, as the server should:
// the prompt expanded by the processor's rule with the media encoded.
func (s *mmServe) direct(t *testing.T, prompt []int32, media []*model.Medium, n int) string {
	t.Helper()
	md := s.mm.media
	var shapes []*model.Medium
	shapes = append(shapes, media...)
	ids, spans, err := md.Tokens.Expand(prompt, shapes)
	if err != nil {
		t.Fatal(err)
	}
	info := s.mm.base.Info()
	pm, err := model.NewPromptMedia(nil, len(ids), info.Hidden, info.DType, spans, md.Tokens.Pad)
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Free()
	st, err := generate.Generate(context.Background(), generate.Wrap(pm.Wrap(s.mm.base), info.Vocab), ids, &generate.Options{MaxTokens: n})
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

func chatText(t *testing.T, code int, body map[string]any) string {
	t.Helper()
	if code != 200 {
		t.Fatalf("status %d: %v", code, body)
	}
	ch := body["choices"].([]any)[0].(map[string]any)
	return ch["message"].(map[string]any)["content"].(string)
}

// TestServeImageMatchesHF sends the fixture's image prompt as an OpenAI
// chat request with an image_url data: URL (and as an Anthropic message
// with a base64 image block), on the serial and the batched lane: the
// greedy reply must be HF's continuation.
func TestServeImageMatchesHF(t *testing.T) {
	s := newMMServe(t)
	pr := s.gold.Prompts["image"]
	want := s.tok.Decode(pr.Greedy, false)
	parts := splitPrompt(pr.IDs)
	img := "data:image/png;base64," + s.b64(t, pr.Image+".png")
	for _, batch := range []int{1, 4} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			cfg := s.cfg
			cfg.Batch = batch
			_, hs := startServer(t, cfg)
			code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{
				"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0,
				"messages": []any{map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": parts[0] + " "},
					map[string]any{"type": "image_url", "image_url": map[string]any{"url": img}},
					map[string]any{"type": "text", "text": " " + parts[1]},
				}}}})
			if got := chatText(t, code, body); got != want {
				t.Fatalf("reply %q, HF's greedy %q", got, want)
			}
			usage := body["usage"].(map[string]any)
			if int(usage["prompt_tokens"].(float64)) != len(pr.IDs) {
				t.Fatalf("usage %v for a %d-token prompt", usage, len(pr.IDs))
			}
			streamed, _ := streamChat(t, hs.URL, map[string]any{
				"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0,
				"messages": []any{map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": parts[0] + " "},
					map[string]any{"type": "image_url", "image_url": map[string]any{"url": img}},
					map[string]any{"type": "text", "text": " " + parts[1]},
				}}}})
			if streamed != want {
				t.Fatalf("streamed reply %q, HF's greedy %q", streamed, want)
			}
			code, body = post(t, hs.URL+"/v1/messages", map[string]any{
				"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0,
				"messages": []any{map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": parts[0] + " "},
					map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": s.b64(t, pr.Image+".png")}},
					map[string]any{"type": "text", "text": " " + parts[1]},
				}}}})
			if code != 200 {
				t.Fatalf("messages: status %d: %v", code, body)
			}
			got := body["content"].([]any)[0].(map[string]any)["text"].(string)
			if got != want {
				t.Fatalf("messages reply %q, HF's greedy %q", got, want)
			}
		})
	}
}

// TestServeAudioMatchesLibrary sends an input_audio request (and one with
// an image and audio) and compares the reply with the library's
// generation on the same expanded prompt. (The fixture's audio goldens
// come from transformers' eager attention, whose audio mask is not the
// one the tower implements: see model/gemma4_audio_test.go.)
func TestServeAudioMatchesLibrary(t *testing.T) {
	s := newMMServe(t)
	_, hs := startServer(t, s.cfg)
	for _, name := range []string{"audio", "both"} {
		t.Run(name, func(t *testing.T) {
			pr := s.gold.Prompts[name]
			parts := splitPrompt(pr.IDs)
			var content []any
			var media []*model.Medium
			var prompt []int32
			prompt = append(prompt, 2)
			enc := func(kind model.MediaKind, file string) {
				data, err := os.ReadFile(filepath.Join(mmFixture, "media", file))
				if err != nil {
					t.Fatal(err)
				}
				m, err := s.mm.media.Encode(kind, data)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Free)
				media = append(media, m)
			}
			text := func(p string) {
				if p == "" {
					return
				}
				content = append(content, map[string]any{"type": "text", "text": " " + p + " "})
				for _, w := range strings.Fields(p) {
					var id int32
					fmt.Sscanf(w, "t%d", &id)
					prompt = append(prompt, id)
				}
			}
			text(parts[0])
			if pr.Image != "" {
				content = append(content, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + s.b64(t, pr.Image+".png")}})
				prompt = append(prompt, 250)
				enc(model.MediaImage, pr.Image+".png")
				text(parts[1])
			}
			content = append(content, map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": s.b64(t, pr.Audio+".wav"), "format": "wav"}})
			prompt = append(prompt, 251)
			enc(model.MediaAudio, pr.Audio+".wav")
			text(parts[len(parts)-1])
			want := s.direct(t, prompt, media, 6)
			code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{
				"model": "gemma4-mm", "max_tokens": 6, "temperature": 0,
				"messages": []any{map[string]any{"role": "user", "content": content}}})
			if got := chatText(t, code, body); got != want {
				t.Fatalf("reply %q, library %q", got, want)
			}
			if n := int(body["usage"].(map[string]any)["prompt_tokens"].(float64)); n != len(pr.IDs) {
				t.Fatalf("%d prompt tokens, the processor's expansion has %d", n, len(pr.IDs))
			}
		})
	}
}

// TestServeMediaErrors: bad media are 400s naming the problem, in each
// API's error shape.
func TestServeMediaErrors(t *testing.T) {
	s := newMMServe(t)
	_, hs := startServer(t, s.cfg)
	png := s.b64(t, "a.png")
	raw, _ := base64.StdEncoding.DecodeString(png)
	trunc := base64.StdEncoding.EncodeToString(raw[:len(raw)/2])
	webp := base64.StdEncoding.EncodeToString([]byte("RIFF\x10\x00\x00\x00WEBPVP8 \x00\x00\x00\x00"))
	bmp := base64.StdEncoding.EncodeToString([]byte("BM\x46\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00"))
	old := mediaByteLimit
	mediaByteLimit = len(raw) + 100 // the fixture's images fit; a bigger one does not
	defer func() { mediaByteLimit = old }()
	big := strings.Repeat("A", mediaByteLimit/3*4+400)
	img := func(url string) map[string]any {
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}}
	}
	for _, c := range []struct {
		name string
		part map[string]any
		want string
	}{
		{"remote url", img("https://example.com/cat.png"), "not fetched"},
		{"not base64", img("data:image/png;base64,@@@@"), "base64"},
		{"corrupt png", img("data:image/png;base64," + trunc), "corrupt media"},
		{"corrupt webp", img("data:image/webp;base64," + webp), "corrupt media"},
		{"bmp", img("data:image/bmp;base64," + bmp), "unsupported media format"},
		{"too large", img("data:image/png;base64," + big), "too large"},
		{"mp3", map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": png, "format": "mp3"}}, "unsupported media format"},
		{"png as wav", map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": png, "format": "wav"}}, "unsupported media format"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{"model": "gemma4-mm", "max_tokens": 2,
				"messages": []any{map[string]any{"role": "user", "content": []any{c.part}}}})
			e, _ := body["error"].(map[string]any)
			if code != 400 || e == nil || e["type"] != "invalid_request_error" || !strings.Contains(fmt.Sprint(e["message"]), c.want) ||
				!strings.HasPrefix(fmt.Sprint(e["param"]), "messages[0].content[0]") {
				t.Fatalf("status %d, body %v (want a 400 saying %q)", code, body, c.want)
			}
		})
	}
	code, body := post(t, hs.URL+"/v1/messages", map[string]any{"model": "gemma4-mm", "max_tokens": 2,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": "https://example.com/a.png"}}}}}})
	if e, _ := body["error"].(map[string]any); code != 400 || body["type"] != "error" || e["type"] != "invalid_request_error" ||
		!strings.Contains(fmt.Sprint(e["message"]), "not fetched") {
		t.Fatalf("anthropic url source: status %d, body %v", code, body)
	}
	code, body = post(t, hs.URL+"/v1/messages", map[string]any{"model": "gemma4-mm", "max_tokens": 2,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": trunc}}}}}})
	if e, _ := body["error"].(map[string]any); code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "corrupt media") {
		t.Fatalf("anthropic corrupt image: status %d, body %v", code, body)
	}
}

// TestServeTextModelRefusesMedia: a model without towers answers image
// parts 400.
func TestServeTextModelRefusesMedia(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	code, body := post(t, hs.URL+"/v1/chat/completions", map[string]any{"model": d.config().ModelID, "max_tokens": 2,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}}}}}})
	e, _ := body["error"].(map[string]any)
	if code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "takes no image") {
		t.Fatalf("status %d, body %v", code, body)
	}
}

// TestServeMediaCountAndChoices: count_tokens counts the expanded image
// run, and n = 2 greedy choices with an image both give HF's reply.
func TestServeMediaCountAndChoices(t *testing.T) {
	s := newMMServe(t)
	_, hs := startServer(t, s.cfg)
	pr := s.gold.Prompts["image"]
	parts := splitPrompt(pr.IDs)
	code, body := post(t, hs.URL+"/v1/messages/count_tokens", map[string]any{"model": "gemma4-mm",
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": parts[0] + " "},
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": s.b64(t, pr.Image+".png")}},
			map[string]any{"type": "text", "text": " " + parts[1]},
		}}}})
	if code != 200 || int(body["input_tokens"].(float64)) != len(pr.IDs) {
		t.Fatalf("count_tokens: status %d, %v (the processor's prompt has %d tokens)", code, body, len(pr.IDs))
	}
	want := s.tok.Decode(pr.Greedy, false)
	code, body = post(t, hs.URL+"/v1/chat/completions", map[string]any{
		"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0, "n": 2,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": parts[0] + " "},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + s.b64(t, pr.Image+".png")}},
			map[string]any{"type": "text", "text": " " + parts[1]},
		}}}})
	if code != 200 {
		t.Fatalf("n=2: status %d: %v", code, body)
	}
	chs := body["choices"].([]any)
	if len(chs) != 2 {
		t.Fatalf("%d choices", len(chs))
	}
	for i, c := range chs {
		if got := c.(map[string]any)["message"].(map[string]any)["content"]; got != want {
			t.Fatalf("choice %d %q, HF's greedy %q", i, got, want)
		}
	}
}
