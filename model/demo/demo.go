// Package demo ships mlxgo's demo model inside the binary, so that a fresh
// checkout can generate text with no download: a 5.8M-parameter Gemma 4
// text model (sliding and full attention layers) with its own 4096-token
// byte-fallback BPE tokenizer, trained by tools/demo-model on
// public-domain English (Moby-Dick and the State of the Union addresses,
// from npm's @stdlib datasets; see LICENSE.md in this folder).
//
// It comes in two forms: the bfloat16 HF checkpoint the training script
// exported (BF16) and the 4-bit MLX checkpoint `mlxgo convert -q` made of
// it (Q4). Loaders map files from disk, so Path writes the chosen form
// into the user's cache directory once (keyed by a hash of its content)
// and returns that folder.
package demo

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
)

// The two shipped forms, as Dir and FS name them.
const (
	// BF16 is the HF checkpoint as trained and exported (bfloat16 weights).
	BF16 = "bf16"
	// Q4 is the 4-bit MLX-format checkpoint (group size 64).
	Q4 = "q4"
)

// Name is how listings and messages call the embedded model.
const Name = "mlxgo-demo"

// CacheEnv, when set, is the folder the forms are written under instead
// of os.UserCacheDir()/mlxgo (tests and read-only homes).
const CacheEnv = "MLXGO_CACHE_DIR"

// readyMark is written last into a materialised folder; a folder without
// it is an interrupted write and is redone.
const readyMark = ".mlxgo-demo-ready"

//go:embed bf16 q4
var files embed.FS

// Forms lists the shipped forms, full precision first.
func Forms() []string { return []string{BF16, Q4} }

// FS returns the files of one form (config.json, model.safetensors,
// tokenizer files) without writing anything, for callers that only read
// metadata (mlxgo ls).
func FS(form string) (fs.FS, error) {
	if form != BF16 && form != Q4 {
		return nil, fmt.Errorf("demo: no form %q (have %s, %s)", form, BF16, Q4)
	}
	return fs.Sub(files, form)
}

// Size is the total byte size of one form's files.
func Size(form string) (int64, error) {
	ents, err := entries(form)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		n += e.size
	}
	return n, nil
}

// Path returns a folder holding the bf16 demo model, writing it into the
// cache on first use. It is what the CLI and server load when no model
// is named.
func Path() (string, error) { return Dir(BF16) }

// QuantizedPath returns a folder holding the 4-bit demo model.
func QuantizedPath() (string, error) { return Dir(Q4) }

type entry struct {
	name string
	size int64
}

type formInfo struct {
	once sync.Once
	ents []entry
	hash string
	err  error
}

var (
	infos   = map[string]*formInfo{BF16: {}, Q4: {}}
	writeMu sync.Mutex
)

// entries lists a form's files (sorted) and computes its content hash once.
func entries(form string) ([]entry, error) {
	fi, ok := infos[form]
	if !ok {
		return nil, fmt.Errorf("demo: no form %q (have %s, %s)", form, BF16, Q4)
	}
	fi.once.Do(func() {
		dir, err := files.ReadDir(form)
		if err != nil {
			fi.err = err
			return
		}
		h := sha256.New()
		for _, d := range dir {
			if d.IsDir() {
				continue
			}
			data, err := files.ReadFile(path.Join(form, d.Name()))
			if err != nil {
				fi.err = err
				return
			}
			fmt.Fprintf(h, "%s\x00%d\x00", d.Name(), len(data))
			h.Write(data)
			fi.ents = append(fi.ents, entry{d.Name(), int64(len(data))})
		}
		sort.Slice(fi.ents, func(i, j int) bool { return fi.ents[i].name < fi.ents[j].name })
		fi.hash = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return fi.ents, fi.err
}

// Hash is the content hash that names a form's cache folder: a new model
// in a new binary lands in a new folder and never mixes with an old one.
func Hash(form string) (string, error) {
	if _, err := entries(form); err != nil {
		return "", err
	}
	return infos[form].hash, nil
}

// cacheRoot is where materialised forms live.
func cacheRoot() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil || d == "" {
		return filepath.Join(os.TempDir(), "mlxgo-cache"), nil
	}
	return filepath.Join(d, "mlxgo"), nil
}

// Dir returns a folder holding the form's files, writing them on first
// use (or when a previous folder was damaged: a missing ready mark or a
// file of the wrong size). Writes go to a temporary sibling that is
// renamed into place, so concurrent processes never see half a model.
func Dir(form string) (string, error) {
	ents, err := entries(form)
	if err != nil {
		return "", err
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(root, "demo-"+form+"-"+infos[form].hash)
	if intact(dst, ents) {
		return dst, nil
	}
	writeMu.Lock()
	defer writeMu.Unlock()
	if intact(dst, ents) {
		return dst, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".demo-"+form+"-*")
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, e := range ents {
		if err := copyOut(path.Join(form, e.name), filepath.Join(tmp, e.name)); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, readyMark), []byte(infos[form].hash+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	// A damaged folder from an earlier run is replaced; another process
	// may win the race to rename, which is fine if its copy is intact.
	if _, err := os.Stat(dst); err == nil {
		if err := os.RemoveAll(dst); err != nil {
			return "", fmt.Errorf("demo: replacing %s: %w", dst, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if intact(dst, ents) {
			return dst, nil
		}
		return "", fmt.Errorf("demo: %w", err)
	}
	return dst, nil
}

// intact reports whether dir holds the ready mark and every file at its
// embedded size.
func intact(dir string, ents []entry) bool {
	if _, err := os.Stat(filepath.Join(dir, readyMark)); err != nil {
		return false
	}
	for _, e := range ents {
		st, err := os.Stat(filepath.Join(dir, e.name))
		if err != nil || !st.Mode().IsRegular() || st.Size() != e.size {
			return false
		}
	}
	return true
}

func copyOut(src, dst string) (err error) {
	in, err := files.Open(src)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo: %w", cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("demo: writing %s: %w", dst, err)
	}
	return nil
}
