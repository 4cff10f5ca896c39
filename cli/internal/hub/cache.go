// Package hub reads and writes the Hugging Face hub cache and downloads
// model repositories into it, so that models pulled by mlxgo are shared
// with huggingface_hub, mlx-lm and transformers (and the other way round).
//
// The cache layout is huggingface_hub's:
//
//	<cache>/models--org--name/blobs/<etag>            file contents
//	<cache>/models--org--name/snapshots/<commit>/path  relative symlinks to blobs
//	<cache>/models--org--name/refs/<branch>            the commit a branch points to
package hub

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CacheDir is the hub cache directory, resolved as huggingface_hub does:
// HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
func CacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return expandHome(d)
	}
	return filepath.Join(HomeDir(), "hub")
}

// HomeDir is the huggingface home (where the token file lives): HF_HOME,
// else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func HomeDir() string {
	if d := os.Getenv("HF_HOME"); d != "" {
		return expandHome(d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(expandHome(d), "huggingface")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "huggingface")
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// RepoFolder is the folder name of a model repo in the cache
// ("org/name" → "models--org--name").
func RepoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// CachedRepo is one model repository found in the cache.
type CachedRepo struct {
	// ID is the repo id, "org/name".
	ID string
	// Dir is the repo's cache folder (models--org--name).
	Dir string
	// Snapshot is the folder holding the files of the revision to use:
	// the one refs/main points to, else the most recently modified
	// snapshot; "" when the repo has no snapshot.
	Snapshot string
	// Commit is Snapshot's commit hash.
	Commit string
}

// CachedRepos lists the model repos in cacheDir, sorted by id. A missing
// cache folder is not an error: it holds no repos.
func CachedRepos(cacheDir string) ([]CachedRepo, error) {
	ents, err := os.ReadDir(cacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []CachedRepo
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "models--") {
			continue
		}
		dir := filepath.Join(cacheDir, name)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		r := CachedRepo{ID: strings.ReplaceAll(strings.TrimPrefix(name, "models--"), "--", "/"), Dir: dir}
		r.Commit, r.Snapshot = pickSnapshot(dir)
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// pickSnapshot prefers the commit refs/main names; a repo pulled at
// another revision only has that snapshot, so the newest one is next.
func pickSnapshot(dir string) (commit, path string) {
	snaps := filepath.Join(dir, "snapshots")
	if b, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err == nil {
		c := strings.TrimSpace(string(b))
		if st, err := os.Stat(filepath.Join(snaps, c)); err == nil && st.IsDir() && c != "" {
			return c, filepath.Join(snaps, c)
		}
	}
	ents, err := os.ReadDir(snaps)
	if err != nil {
		return "", ""
	}
	var best fs.FileInfo
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		if best == nil || info.ModTime().After(best.ModTime()) {
			best = info
		}
	}
	if best == nil {
		return "", ""
	}
	return best.Name(), filepath.Join(snaps, best.Name())
}
