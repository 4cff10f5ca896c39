package serve

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSSDCacheRestart: a 2,000-token prompt's KV (300 under the race
// detector) is written to the SSD cache; after a restart the same request
// takes all but its last token from the file and answers exactly what the cold run answered; a flipped byte
// in the file is caught, the file quarantined and not served (the answer
// is still the same, computed).
func TestSSDCacheRestart(t *testing.T) {
	d := loadDemo(t)
	dir := t.TempDir()
	cfg := d.config()
	cfg.SSDCacheDir = dir
	r := rand.New(rand.NewPCG(1, 2))
	n := 2000
	if raceEnabled {
		n = 300 // the race detector makes the cold prefill ~10× slower
	}
	prompt := make([]int, n)
	for i := range prompt {
		prompt[i] = 10 + r.IntN(d.tok.VocabSize()-10)
	}
	body := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0}
	ask := func(url string) (string, float64, time.Duration) {
		t.Helper()
		start := time.Now()
		code, out := post(t, url+"/v1/completions", body)
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		u := out["usage"].(map[string]any)
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64), time.Since(start)
	}
	srv, hs := startServer(t, cfg)
	cold, cached, coldT := ask(hs.URL)
	if cached != 0 {
		t.Fatalf("cold run: %v cached tokens", cached)
	}
	resp, err := hs.Client().Post(hs.URL+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flush: %v %v", resp, err)
	}
	resp.Body.Close()
	if st := srv.Stats(); st.SSD == nil || st.SSD.Entries != 1 || st.SSD.Writes != 1 {
		t.Fatalf("after the flush: %+v", st.SSD)
	}
	hs.Close()
	srv.Close()

	srv2, hs2 := startServer(t, cfg) // a restart over the same folder
	warm, cached, warmT := ask(hs2.URL)
	if warm != cold || cached < 0.9*float64(len(prompt)) {
		t.Errorf("after the restart: %q with %v cached tokens, cold %q", warm, cached, cold)
	}
	t.Logf("%d-token prompt: cold %v, restored from the SSD cache %v (%v cached)", n, coldT, warmT, cached)
	if st := srv2.Stats(); st.SSD.Hits != 1 {
		t.Errorf("stats %+v", st.SSD)
	}
	hs2.Close()
	srv2.Close()

	files, _ := filepath.Glob(filepath.Join(dir, "*"+ssdExt))
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[4096+777] ^= 0x10 // inside the first array
	if err := os.WriteFile(files[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	srv3, hs3 := startServer(t, cfg)
	again, cached, _ := ask(hs3.URL)
	if again != cold || cached != 0 {
		t.Errorf("with a corrupt file: %q with %v cached tokens, cold %q", again, cached, cold)
	}
	if st := srv3.Stats(); st.SSD.Quarantined != 1 || st.SSD.Hits != 0 {
		t.Errorf("the corrupt file was not quarantined: %+v", st.SSD)
	}
	if _, err := os.Stat(files[0] + ssdQuarantine); err != nil {
		t.Errorf("no quarantined file: %v", err)
	}
}
