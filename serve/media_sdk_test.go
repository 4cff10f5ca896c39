package serve

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
)

// TestOfficialSDKMedia sends the fixture's image prompt and its audio
// prompt through the official OpenAI Node SDK (image_url data: URL,
// input_audio), plain and streamed: the image reply must be HF's greedy
// continuation and the audio reply the library's generation on the same
// expanded prompt (what `mlxgo generate --image/--audio` runs); a corrupt
// image must come back as the SDK's 400 error naming the problem.
func TestOfficialSDKMedia(t *testing.T) {
	dir, why := sdkDir(t)
	if dir == "" {
		t.Skip("skipping the Node SDK media test: " + why)
	}
	s := newMMServe(t)
	_, hs := startServer(t, s.cfg)
	img := s.gold.Prompts["image"]
	ip := splitPrompt(img.IDs)
	imgURL := "data:image/png;base64," + s.b64(t, img.Image+".png")
	au := s.gold.Prompts["audio"]
	ap := splitPrompt(au.IDs)
	data, err := os.ReadFile(filepath.Join(mmFixture, "media", au.Audio+".wav"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.mm.media.Encode(model.MediaAudio, data)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	prompt := []int32{2}
	ids := func(p string) {
		for _, w := range strings.Fields(p) {
			var id int32
			if _, err := fmt.Sscanf(w, "t%d", &id); err == nil {
				prompt = append(prompt, id)
			}
		}
	}
	ids(ap[0])
	prompt = append(prompt, 251)
	ids(ap[len(ap)-1])
	wantAudio := s.direct(t, prompt, []*model.Medium{m}, 6)
	raw, _ := base64.StdEncoding.DecodeString(s.b64(t, img.Image+".png"))
	corrupt := "data:image/png;base64," + base64.StdEncoding.EncodeToString(raw[:len(raw)/2])
	text := func(p string) map[string]any { return map[string]any{"type": "text", "text": p} }
	reqs := map[string]any{
		"image": map[string]any{"max_tokens": len(img.Greedy), "messages": []any{map[string]any{"role": "user", "content": []any{
			text(ip[0] + " "), map[string]any{"type": "image_url", "image_url": map[string]any{"url": imgURL}}, text(" " + ip[1])}}}},
		"audio": map[string]any{"max_tokens": 6, "messages": []any{map[string]any{"role": "user", "content": []any{
			text(" " + ap[0] + " "), map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": base64.StdEncoding.EncodeToString(data), "format": "wav"}},
			text(" " + ap[len(ap)-1] + " ")}}}},
		"corrupt": map[string]any{"max_tokens": 4, "messages": []any{map[string]any{"role": "user", "content": []any{
			text("look "), map[string]any{"type": "image_url", "image_url": map[string]any{"url": corrupt}}}}}},
	}
	rq, _ := json.Marshal(reqs)
	script, _ := filepath.Abs("testdata/sdk_media.cjs")
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"), "BASE_URL="+hs.URL, "REQUESTS="+string(rq))
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node: %v\n%s", err, stderr)
	}
	var got map[string]struct {
		Text, Streamed, Message, Type string
		PromptTokens                  int `json:"prompt_tokens"`
		Status                        int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	wantImage := s.tok.Decode(img.Greedy, false)
	if g := got["image"]; g.Text != wantImage || g.Streamed != wantImage || g.PromptTokens != len(img.IDs) {
		t.Errorf("image through the SDK: %+v, want HF's greedy %q and %d prompt tokens", g, wantImage, len(img.IDs))
	}
	if g := got["audio"]; g.Text != wantAudio || g.Streamed != wantAudio || g.PromptTokens != len(au.IDs) {
		t.Errorf("audio through the SDK: %+v, want the library's %q and %d prompt tokens", g, wantAudio, len(au.IDs))
	}
	if g := got["corrupt"]; g.Status != 400 || g.Type != "invalid_request_error" || !strings.Contains(g.Message, "corrupt media: png") {
		t.Errorf("corrupt image through the SDK: %+v, want a 400 naming the corrupt PNG", g)
	}
}
