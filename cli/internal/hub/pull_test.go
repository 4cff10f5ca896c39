package hub

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/cli/internal/hub/hubtest"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func testClient(h *hubtest.Hub, cache string) *Client {
	return &Client{Endpoint: h.URL, CacheDir: cache, Retries: 0, RetryDelay: time.Millisecond}
}

func countPrefix(reqs []string, prefix string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// TestPullResumes breaks the weights' download midway, checks the partial
// file is kept, then pulls again and checks the second pull asks only for
// the missing bytes, verifies them, links the snapshot, and that a third
// pull fetches nothing.
func TestPullResumes(t *testing.T) {
	weights := randBytes(300_000, 1)
	cfg := []byte(`{"model_type": "llama"}`)
	extra := []byte("nested file\n")
	repo := &hubtest.Repo{Files: map[string]*hubtest.File{
		"config.json":       {Data: cfg},
		"model.safetensors": {Data: weights, LFS: true, CutAfter: 100_000, CutTimes: 1},
		"sub/extra.txt":     {Data: extra},
	}}
	h := hubtest.New(map[string]*hubtest.Repo{"org/tiny": repo})
	defer h.Close()
	cache := t.TempDir()
	c := testClient(h, cache)
	_, err := c.Pull(context.Background(), "org/tiny", Options{})
	if err == nil {
		t.Fatal("pull with a broken connection and no retries succeeded")
	}
	blob := filepath.Join(cache, "models--org--tiny", "blobs", hubtest.SHA256(weights))
	st, err := os.Stat(blob + ".incomplete")
	if err != nil || st.Size() != 100_000 {
		t.Fatalf("partial file: %v, %v (want 100000 bytes kept)", st, err)
	}
	var buf bytes.Buffer
	res, err := c.Pull(context.Background(), "org/tiny", Options{Progress: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.Requests(), "GET /cdn/"+hubtest.SHA256(weights)+" bytes=100000-") {
		t.Fatalf("no resuming Range request in %q", h.Requests())
	}
	if res.Downloaded != int64(len(weights)-100_000+len(extra)) { // config.json came in the first pull
		t.Errorf("downloaded %d bytes", res.Downloaded)
	}
	if res.Commit != repo.Commit || res.Snapshot != filepath.Join(cache, "models--org--tiny", "snapshots", repo.Commit) {
		t.Errorf("result %+v", res)
	}
	for name, want := range map[string][]byte{"config.json": cfg, "model.safetensors": weights, "sub/extra.txt": extra} {
		got, err := os.ReadFile(filepath.Join(res.Snapshot, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
		if l, err := os.Readlink(filepath.Join(res.Snapshot, name)); err != nil || filepath.IsAbs(l) {
			t.Errorf("%s: want a relative symlink, got %q %v", name, l, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--tiny", "blobs", hubtest.GitBlobID(cfg))); err != nil {
		t.Errorf("config blob not named by its git id: %v", err)
	}
	if _, err := os.Stat(blob + ".incomplete"); !os.IsNotExist(err) {
		t.Errorf(".incomplete left behind: %v", err)
	}
	if ref, _ := os.ReadFile(filepath.Join(cache, "models--org--tiny", "refs", "main")); string(ref) != repo.Commit {
		t.Errorf("refs/main = %q", ref)
	}
	if !strings.Contains(buf.String(), "[3/3] sub/extra.txt") {
		t.Errorf("progress output %q", buf.String())
	}
	before := countPrefix(h.Requests(), "GET /cdn/") + countPrefix(h.Requests(), "GET /org/tiny/resolve/")
	buf.Reset()
	res, err = c.Pull(context.Background(), "org/tiny", Options{Progress: &buf})
	if !strings.Contains(buf.String(), "[2/3] model.safetensors 300.0 kB (already in the cache)") {
		t.Errorf("progress of a cached pull: %q", buf.String())
	}
	if err != nil || res.Downloaded != 0 {
		t.Fatalf("third pull: %v, downloaded %d", err, res.Downloaded)
	}
	if after := countPrefix(h.Requests(), "GET /cdn/") + countPrefix(h.Requests(), "GET /org/tiny/resolve/"); after != before {
		t.Errorf("a cached repo was downloaded again (%d → %d GETs)", before, after)
	}
	repos, err := CachedRepos(cache)
	if err != nil || len(repos) != 1 || repos[0].ID != "org/tiny" || repos[0].Snapshot != res.Snapshot {
		t.Fatalf("CachedRepos: %+v %v", repos, err)
	}
}

// TestPullRetriesWithinOneCall: with retries allowed, a dropped connection
// is resumed inside the same pull.
func TestPullRetriesWithinOneCall(t *testing.T) {
	weights := randBytes(200_000, 2)
	h := hubtest.New(map[string]*hubtest.Repo{"org/r": {Files: map[string]*hubtest.File{
		"w.safetensors": {Data: weights, LFS: true, CutAfter: 50_000, CutTimes: 2},
	}}})
	defer h.Close()
	c := testClient(h, t.TempDir())
	c.Retries = 3
	var buf bytes.Buffer
	res, err := c.Pull(context.Background(), "org/r", Options{Progress: &buf, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(res.Snapshot, "w.safetensors"))
	if !bytes.Equal(got, weights) {
		t.Fatal("content differs")
	}
	// The second break happens on a full GET only, so the cut budget is
	// spent by attempt 1; attempt 2 resumes at 50000.
	if !slices.Contains(h.Requests(), "GET /cdn/"+hubtest.SHA256(weights)+" bytes=50000-") {
		t.Errorf("requests %q", h.Requests())
	}
	out := buf.String()
	if !strings.Contains(out, "\r") || !strings.Contains(out, "100%") || !strings.Contains(out, "retrying") {
		t.Errorf("tty progress %q", out)
	}
}

// TestPullRefusesBadHash: content that does not match the announced
// sha256 (LFS) or git blob id (regular file) is discarded, not linked.
func TestPullRefusesBadHash(t *testing.T) {
	for _, lfs := range []bool{true, false} {
		data := randBytes(10_000, 3)
		h := hubtest.New(map[string]*hubtest.Repo{"org/bad": {Files: map[string]*hubtest.File{
			"model.safetensors": {Data: data, LFS: lfs, WrongSHA: true},
		}}})
		cache := t.TempDir()
		_, err := testClient(h, cache).Pull(context.Background(), "org/bad", Options{})
		h.Close()
		if !errors.Is(err, ErrVerify) {
			t.Fatalf("lfs=%v: err %v, want ErrVerify", lfs, err)
		}
		blobs, _ := os.ReadDir(filepath.Join(cache, "models--org--bad", "blobs"))
		if len(blobs) != 0 {
			t.Errorf("lfs=%v: blobs kept after a hash mismatch: %v", lfs, blobs)
		}
		if _, err := os.Stat(filepath.Join(cache, "models--org--bad", "snapshots")); !os.IsNotExist(err) {
			t.Errorf("lfs=%v: snapshot created: %v", lfs, err)
		}
	}
}

// TestPullAuthAndNotFound: a private repo needs the token; a missing repo
// says so; neither leaves anything in the cache.
func TestPullAuthAndNotFound(t *testing.T) {
	h := hubtest.New(map[string]*hubtest.Repo{"org/private": {Private: true, Files: map[string]*hubtest.File{
		"config.json": {Data: []byte("{}")},
	}}})
	defer h.Close()
	h.Token = "hf_secret"
	cache := t.TempDir()
	c := testClient(h, cache)
	_, err := c.Pull(context.Background(), "org/private", Options{})
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("no token: %v", err)
	}
	c.Token = "hf_wrong"
	if _, err = c.Pull(context.Background(), "org/private", Options{}); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("wrong token: %v", err)
	}
	_, err = c.Pull(context.Background(), "org/missing", Options{})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing repo: %v", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("cache written by failed pulls: %v", ents)
	}
	c.Token = "hf_secret"
	if _, err := c.Pull(context.Background(), "org/private", Options{}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	_, err = c.Pull(context.Background(), "org/private", Options{Revision: "v9"})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing revision: %v", err)
	}
	for _, bad := range []string{"../x", "a/b/c", "", "org/..", "org/a--b"} {
		if _, err := c.Pull(context.Background(), bad, Options{}); err == nil {
			t.Errorf("repo id %q accepted", bad)
		}
	}
}

func TestPullIncludeExclude(t *testing.T) {
	files := map[string]*hubtest.File{
		"config.json": {Data: []byte("{}")}, "tokenizer.json": {Data: []byte("{}")},
		"model.safetensors": {Data: []byte("w"), LFS: true}, "onnx/model.onnx": {Data: []byte("o")},
	}
	h := hubtest.New(map[string]*hubtest.Repo{"org/m": {Files: files}})
	defer h.Close()
	for _, tc := range []struct {
		inc, exc []string
		want     []string
	}{
		{[]string{"*.json"}, nil, []string{"config.json", "tokenizer.json"}},
		{nil, []string{"onnx/*", "tok*"}, []string{"config.json", "model.safetensors"}},
		{[]string{"*model*"}, []string{"*.onnx"}, []string{"model.safetensors"}},
		{[]string{"[ct]o*.json"}, []string{"[!c]*"}, []string{"config.json"}},
	} {
		res, err := testClient(h, t.TempDir()).Pull(context.Background(), "org/m", Options{Include: tc.inc, Exclude: tc.exc})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(res.Files)
		if !slices.Equal(res.Files, tc.want) {
			t.Errorf("include %v exclude %v: %v, want %v", tc.inc, tc.exc, res.Files, tc.want)
		}
	}
	if _, err := testClient(h, t.TempDir()).Pull(context.Background(), "org/m", Options{Include: []string{"*.gguf"}}); err == nil {
		t.Error("a pull matching no file succeeded")
	}
}

func TestEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file\n"), 0o600)
	c := NewClient()
	if c.CacheDir != filepath.Join(home, "hub") || c.Endpoint != "http://127.0.0.1:9" || c.Token != "hf_file" {
		t.Fatalf("client %+v", c)
	}
	t.Setenv("HF_HUB_CACHE", "/x/hub")
	t.Setenv("HF_TOKEN", "hf_env")
	if c := NewClient(); c.CacheDir != "/x/hub" || c.Token != "hf_env" {
		t.Fatalf("client %+v", c)
	}
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if d := CacheDir(); d != "/xdg/huggingface/hub" {
		t.Fatalf("CacheDir with XDG_CACHE_HOME: %s", d)
	}
}
