package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/cli/internal/hub"
	"github.com/mlxgo/mlxgo/model/demo"
)

// resolveModel turns a verb's model argument into a model folder, so
// every verb accepts the same things: a path to a folder; the embedded
// demo model ("" — whatever folders the working directory holds — or
// "demo" or "mlxgo-demo", "demo-q4" for its 4-bit form, written to the
// user's cache on first use); or a case-insensitive
// substring of the id of a repo in the Hugging Face cache (hub.CacheDir:
// HF_HUB_CACHE, HF_HOME, ~/.cache), whose current snapshot is used, or of
// the name of a model in the local models folder that `mlxgo ls` lists
// ($MLXGO_MODELS, ~/.mlxgo/models). A name matching exactly wins over
// substrings; several matches are an error that lists them, so the user
// can pick; no match is an error naming the places searched.
func resolveModel(arg string) (string, error) {
	return resolveModelIn(arg, hub.CacheDir(), defaultModelsDir())
}

// resolveModelIn is resolveModel with explicit HF cache and local models
// folders ("" for none).
func resolveModelIn(arg, cacheDir, modelsDir string) (string, error) {
	if arg == "" {
		return demo.Dir(demo.BF16)
	}
	st, err := os.Stat(arg)
	if err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("model %s is a file; give the folder holding config.json", arg)
		}
		return arg, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if looksLikePath(arg) {
		return "", fmt.Errorf("model folder %s does not exist", arg)
	}
	switch strings.ToLower(arg) {
	case "demo", demo.Name, "demo-" + demo.BF16, demo.Name + "-" + demo.BF16:
		return demo.Dir(demo.BF16)
	case "demo-" + demo.Q4, demo.Name + "-" + demo.Q4:
		return demo.Dir(demo.Q4)
	}
	type candidate struct{ name, dir, where string }
	var cands []candidate
	repos, err := hub.CachedRepos(cacheDir)
	if err != nil {
		return "", fmt.Errorf("reading the HF cache %s: %w", cacheDir, err)
	}
	for _, r := range repos {
		c := candidate{name: r.ID, dir: r.Snapshot, where: "HF cache"}
		if r.Snapshot == "" {
			c.where = "HF cache, no snapshot: pull it again"
		}
		cands = append(cands, c)
	}
	if modelsDir != "" {
		local, err := localModels(modelsDir)
		if err != nil {
			return "", err
		}
		for _, m := range local {
			cands = append(cands, candidate{name: m.Name, dir: m.Path, where: "local: " + m.Path})
		}
	}
	needle := strings.ToLower(arg)
	var matches []candidate
	for _, c := range cands {
		id := strings.ToLower(c.name)
		if id == needle {
			matches = []candidate{c}
			break
		}
		if strings.Contains(id, needle) {
			matches = append(matches, c)
		}
	}
	switch len(matches) {
	case 0:
		where := "the HF cache " + cacheDir
		if modelsDir != "" {
			where += " or the models folder " + modelsDir
		}
		return "", fmt.Errorf("model %q: no such folder, and nothing in %s matches it (download one with: mlxgo pull ORG/NAME; list them with: mlxgo ls)", arg, where)
	case 1:
		c := matches[0]
		if c.dir == "" {
			return "", fmt.Errorf("model %q: the cached repo %s has no snapshot (pull it again)", arg, c.name)
		}
		return c.dir, nil
	}
	ids := make([]string, len(matches))
	for i, c := range matches {
		ids[i] = "  " + c.name + " (" + c.where + ")"
	}
	return "", fmt.Errorf("%w: model %q matches %d cached repos; give more of the id:\n%s", errUsage, arg, len(matches), strings.Join(ids, "\n"))
}

// looksLikePath reports whether arg was meant as a path (it cannot be a
// repo id), so a typo gets "does not exist" rather than a cache search.
func looksLikePath(arg string) bool {
	return filepath.IsAbs(arg) || strings.HasPrefix(arg, ".") || strings.HasPrefix(arg, "~") ||
		strings.Count(arg, "/") > 1 || strings.ContainsRune(arg, filepath.Separator) && filepath.Separator != '/'
}
