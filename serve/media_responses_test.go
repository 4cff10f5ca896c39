package serve

import (
	"fmt"
	"strings"
	"testing"
)

// TestServeResponsesImage sends the fixture's image prompt to the
// Responses API as input_text and input_image parts (image_url a data:
// URL, as a string and as {url}): the greedy reply must be HF's
// continuation, a previous_response_id continuation still carries the
// image, and bad parts are 400s naming the member.
func TestServeResponsesImage(t *testing.T) {
	s := newMMServe(t)
	pr := s.gold.Prompts["image"]
	want := s.tok.Decode(pr.Greedy, false)
	parts := splitPrompt(pr.IDs)
	img := "data:image/png;base64," + s.b64(t, pr.Image+".png")
	_, hs := startServer(t, s.cfg)
	for _, iu := range []any{img, map[string]any{"url": img}} {
		code, body := post(t, hs.URL+"/v1/responses", map[string]any{
			"model": "gemma4-mm", "max_output_tokens": len(pr.Greedy), "temperature": 0,
			"input": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": parts[0] + " "},
				map[string]any{"type": "input_image", "image_url": iu, "detail": "auto"},
				map[string]any{"type": "input_text", "text": " " + parts[1]},
			}}}})
		if code != 200 {
			t.Fatalf("status %d: %v", code, body)
		}
		if got := responseText(t, body); got != want {
			t.Fatalf("reply %q, HF's greedy %q", got, want)
		}
		usage := body["usage"].(map[string]any)
		if int(usage["input_tokens"].(float64)) != len(pr.IDs) {
			t.Fatalf("usage %v for a %d-token prompt", usage, len(pr.IDs))
		}
		// The continuation's prompt is the stored conversation (the image
		// included), the reply and the new turn. The test template joins
		// contents without spaces, so the last prompt word, the reply and
		// the new word fuse into one (unknown) word: the image's run keeps
		// the count at least the first turn's, less one.
		code, next := post(t, hs.URL+"/v1/responses", map[string]any{
			"model": "gemma4-mm", "max_output_tokens": 1, "temperature": 0, "previous_response_id": body["id"],
			"input": "t5"})
		if code != 200 {
			t.Fatalf("continuation: status %d: %v", code, next)
		}
		if n := int(next["usage"].(map[string]any)["input_tokens"].(float64)); n < len(pr.IDs)-1 {
			t.Fatalf("continuation counts %d input tokens, the first turn alone %d", n, len(pr.IDs))
		}
	}
	for _, c := range []struct {
		name  string
		part  map[string]any
		param string
		want  string
	}{
		{"file_id", map[string]any{"type": "input_image", "file_id": "file-1"}, "input[0].content[0].file_id", "no files API"},
		{"no url", map[string]any{"type": "input_image"}, "input[0].content[0].image_url", "needs image_url"},
		{"remote", map[string]any{"type": "input_image", "image_url": "https://example.com/a.png"}, "", "not fetched"},
		{"not an image", map[string]any{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}, "input[0].content[0].image_url", "unsupported media format"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := post(t, hs.URL+"/v1/responses", map[string]any{"model": "gemma4-mm", "max_output_tokens": 1,
				"input": []any{map[string]any{"role": "user", "content": []any{c.part}}}})
			e, _ := body["error"].(map[string]any)
			if code != 400 || !strings.Contains(fmt.Sprint(e["message"]), c.want) || c.param != "" && e["param"] != c.param {
				t.Fatalf("status %d, error %v; want a 400 naming %q at %q", code, e, c.want, c.param)
			}
			if !strings.HasPrefix(fmt.Sprint(e["param"]), "input") {
				t.Fatalf("param %v does not name the input", e["param"])
			}
		})
	}
}

// TestServeResponsesTextModelRefusesImage: input_image on a text-only
// model is a 400 naming the missing input kind.
func TestServeResponsesTextModelRefusesImage(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	code, body := post(t, hs.URL+"/v1/responses", map[string]any{"model": d.config().ModelID, "max_output_tokens": 2,
		"input": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}}}}})
	e, _ := body["error"].(map[string]any)
	if code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "takes no image") {
		t.Fatalf("status %d, body %v", code, body)
	}
}
