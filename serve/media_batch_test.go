package serve

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// otherImage is the fixture's a.png with its pixels changed: the same
// size, so the same soft-token count and the same prompt ids.
func otherImage(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(mmFixture, "media", "a.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := src.Bounds()
	dst := image.NewNRGBA(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := src.At(x, y).RGBA()
			dst.Set(x, y, color.NRGBA{uint8(255 - r>>8), uint8(bl >> 8), uint8(g >> 8), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, dst); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// TestServeMediaBatchedRows: on the batched lane, image requests join the
// batch as rows (lane "batched") beside each other and a text request;
// each reply equals the serial lane's for that request alone (which the
// fixture's image prompt holds to HF's greedy), and each image row's
// logprobs beside other rows equal, bit for bit, its run alone on the lane. The prefix cache never
// serves one image's KV for another's identical placeholder ids: a second
// image after the first has nothing cached, the first image again reuses
// its prompt.
func TestServeMediaBatchedRows(t *testing.T) {
	s := newMMServe(t)
	pr := s.gold.Prompts["image"]
	parts := splitPrompt(pr.IDs)
	imgs := []string{s.b64(t, pr.Image+".png"), otherImage(t)}
	req := func(img string, n int) map[string]any {
		content := []any{map[string]any{"type": "text", "text": parts[0] + " "}}
		if img != "" {
			content = append(content, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + img}})
		}
		content = append(content, map[string]any{"type": "text", "text": " " + parts[1]})
		return map[string]any{"model": "gemma4-mm", "max_tokens": n, "temperature": 0, "logprobs": true,
			"messages": []any{map[string]any{"role": "user", "content": content}}}
	}
	n := len(pr.Greedy)
	serial := s.cfg
	serial.Batch = 1
	_, hs1 := startServer(t, serial)
	want := map[int]string{}
	for i, img := range append(imgs, "") {
		code, body := post(t, hs1.URL+"/v1/chat/completions", req(img, n))
		want[i] = chatText(t, code, body)
	}
	if want[0] != s.tok.Decode(pr.Greedy, false) {
		t.Fatalf("serial image reply %q, HF's greedy %q", want[0], s.tok.Decode(pr.Greedy, false))
	}
	if want[0] == want[1] {
		t.Fatalf("the two images give the same reply %q: the test cannot tell them apart", want[0])
	}

	batched := s.cfg
	batched.Batch = 4
	_, hs := startServer(t, batched)
	usageOf := func(body map[string]any) (cached int, lane string) {
		u := body["usage"].(map[string]any)
		d, _ := u["prompt_tokens_details"].(map[string]any)
		c, _ := d["cached_tokens"].(float64)
		l, _ := u["lane"].(string)
		return int(c), l
	}
	logprobs := func(body map[string]any) []float64 {
		var out []float64
		lp, _ := body["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
		for _, c := range lp["content"].([]any) {
			out = append(out, c.(map[string]any)["logprob"].(float64))
		}
		return out
	}
	alone := map[int][]float64{}
	// one image, then the other with the same ids: nothing cached
	for i, wantCached := range []bool{false, false, true} {
		k := i % 2
		code, body := post(t, hs.URL+"/v1/chat/completions", req(imgs[k], n))
		if got := chatText(t, code, body); got != want[k] {
			t.Fatalf("request %d (image %d): %q, alone on the serial lane %q", i, k, got, want[k])
		}
		if i < 2 {
			alone[k] = logprobs(body)
		}
		cached, lane := usageOf(body)
		if lane != "batched" || (cached > 0) != wantCached {
			t.Fatalf("request %d (image %d): lane %q, %d cached tokens (want cached: %v)", i, k, lane, cached, wantCached)
		}
	}
	// all at once: two images, the first again, and text
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, k := range []int{0, 1, 0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img := ""
			if k < 2 {
				img = imgs[k]
			}
			code, body := post(t, hs.URL+"/v1/chat/completions", req(img, n))
			if code != 200 {
				errs[i] = fmt.Errorf("status %d: %v", code, body)
				return
			}
			got := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
			if _, lane := usageOf(body); got != want[k] || lane != "batched" {
				errs[i] = fmt.Errorf("request %d (%d): %q on lane %q, alone %q", i, k, got, lane, want[k])
			} else if k < 2 && !slices.Equal(logprobs(body), alone[k]) {
				errs[i] = fmt.Errorf("request %d (image %d): logprobs %v beside other rows, %v alone", i, k, logprobs(body), alone[k])
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
