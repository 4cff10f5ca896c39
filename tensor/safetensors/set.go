package safetensors

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mlxgo/mlxgo/tensor"
)

// IndexName is the file that maps tensor names to shards in a sharded
// checkpoint, as written by transformers and mlx-lm.
const IndexName = "model.safetensors.index.json"

// SingleName is the file name of an unsharded checkpoint.
const SingleName = "model.safetensors"

// Set is a checkpoint spread over several files, looked up as one: model
// code asks for "model.layers.3.mlp.up_proj.weight" without caring which
// shard holds it. A Set is safe for concurrent use until Close.
type Set struct {
	dir   string
	files []*File // in path order
	where map[string]*File
	names []string // sorted
}

// OpenDir opens the checkpoint in dir: the shards named by
// model.safetensors.index.json when there is one, else model.safetensors,
// else every *.safetensors file in the folder (dot files excepted, such as
// macOS's "._" companions). A path to a single file opens just that file.
//
// Every shard is validated as Open does. The set as a whole must be
// consistent: each tensor is stored exactly once, and every tensor the
// index lists is in the shard it names. Shard paths in the index must stay
// inside dir, so a downloaded index cannot make the loader map arbitrary
// files; the check is on the path as written, and symlinks are followed,
// since the Hugging Face cache makes every shard a link into its blob store.
func OpenDir(dir string) (*Set, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, &Error{File: dir, Kind: err}
	}
	if st.Mode().IsRegular() {
		return openSet(filepath.Dir(dir), []string{dir}, nil, "")
	}
	indexPath := filepath.Join(dir, IndexName)
	raw, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		weightMap, err := parseIndex(indexPath, raw)
		if err != nil {
			return nil, err
		}
		var paths []string
		seen := map[string]bool{}
		for _, name := range slices.Sorted(maps.Keys(weightMap)) {
			shard := weightMap[name]
			rel := filepath.FromSlash(shard)
			if !filepath.IsLocal(rel) {
				return nil, tensorErr(indexPath, name, ErrFormat, "shard path %q escapes the checkpoint directory", shard)
			}
			p := filepath.Join(dir, rel)
			if seen[p] {
				continue
			}
			seen[p] = true
			if _, err := os.Stat(p); err != nil {
				return nil, tensorErr(indexPath, name, ErrFormat, "index names shard %q, which cannot be opened: %v", shard, err)
			}
			paths = append(paths, p)
		}
		full := make(map[string]string, len(weightMap))
		for name, shard := range weightMap {
			full[name] = filepath.Join(dir, filepath.FromSlash(shard))
		}
		return openSet(dir, paths, full, indexPath)
	case !errors.Is(err, os.ErrNotExist):
		return nil, &Error{File: indexPath, Kind: err}
	}
	single := filepath.Join(dir, SingleName)
	if st, err := os.Stat(single); err == nil && st.Mode().IsRegular() {
		return openSet(dir, []string{single}, nil, "")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &Error{File: dir, Kind: err}
	}
	var paths []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".safetensors") || !e.Type().IsRegular() {
			continue
		}
		paths = append(paths, filepath.Join(dir, n))
	}
	if len(paths) == 0 {
		return nil, formatErr(dir, "no %s, %s or *.safetensors files in the directory", IndexName, SingleName)
	}
	return openSet(dir, paths, nil, "")
}

// parseIndex reads the weight_map of an index file, refusing duplicate
// names (which would leave it ambiguous where a tensor lives).
func parseIndex(path string, raw []byte) (map[string]string, error) {
	if !utf8.Valid(raw) {
		return nil, formatErr(path, "invalid JSON index: not valid UTF-8")
	}
	s := &scanner{file: path, doc: "index", b: raw}
	if s.peek() != '{' {
		return nil, s.typeErr(formatErr(path, "index is %s, not an object", s.kind()))
	}
	var weightMap map[string]string
	err := s.members(func(key string) error {
		if key != "weight_map" {
			return s.skip(1)
		}
		if weightMap != nil {
			return formatErr(path, "duplicate key \"weight_map\"")
		}
		if s.peek() != '{' {
			return s.typeErr(formatErr(path, "weight_map is %s, want an object", s.kind()))
		}
		weightMap = map[string]string{}
		return s.members(func(name string) error {
			if s.peek() != '"' {
				return s.typeErr(tensorErr(path, name, ErrFormat, "weight_map value is %s, want a file name", s.kind()))
			}
			shard, err := s.str()
			if err != nil {
				return err
			}
			if _, dup := weightMap[name]; dup {
				return tensorErr(path, name, ErrFormat, "listed twice in weight_map")
			}
			weightMap[name] = shard
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if err := s.end("index"); err != nil {
		return nil, err
	}
	if weightMap == nil {
		return nil, formatErr(path, "index has no weight_map")
	}
	return weightMap, nil
}

// openSet opens paths and checks their consistency with each other and
// with the index's weight map (full paths), when there is one.
func openSet(dir string, paths []string, weightMap map[string]string, indexPath string) (_ *Set, err error) {
	slices.Sort(paths)
	s := &Set{dir: dir, where: map[string]*File{}}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			return nil, err
		}
		s.files = append(s.files, f)
		for _, name := range f.names {
			if other, dup := s.where[name]; dup {
				return nil, tensorErr(p, name, ErrFormat, "also stored in shard %s", other.path)
			}
			s.where[name] = f
		}
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		want := weightMap[name]
		got, ok := s.where[name]
		switch {
		case !ok:
			return nil, tensorErr(indexPath, name, ErrFormat, "listed in the index under shard %s but absent from it", want)
		case got.path != want:
			return nil, tensorErr(indexPath, name, ErrFormat, "listed in the index under shard %s but stored in %s", want, got.path)
		}
	}
	s.names = slices.Sorted(maps.Keys(s.where))
	return s, nil
}

// Dir returns the checkpoint directory.
func (s *Set) Dir() string { return s.dir }

// Files returns the open shards in path order.
func (s *Set) Files() []*File { return slices.Clone(s.files) }

// Len returns the number of tensors over all shards.
func (s *Set) Len() int { return len(s.names) }

// Names returns every tensor name, sorted. The slice is the caller's.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Has reports whether some shard stores name.
func (s *Set) Has(name string) bool {
	_, ok := s.where[name]
	return ok
}

// File returns the shard that stores name.
func (s *Set) File(name string) (*File, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, tensorErr(s.dir, name, ErrNotFound, "no such tensor in any shard")
	}
	return f, nil
}

// Info describes the named tensor, as File.Info.
func (s *Set) Info(name string) (TensorInfo, error) {
	f, err := s.File(name)
	if err != nil {
		return TensorInfo{}, err
	}
	return f.Info(name)
}

// Bytes returns the named tensor's raw data, as File.Bytes.
func (s *Set) Bytes(name string) ([]byte, error) {
	f, err := s.File(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// Array returns the named tensor as an array, as File.Array; borrowed
// arrays must be freed before Close.
func (s *Set) Array(name string, be tensor.Backend, copy bool) (*tensor.Array, error) {
	f, err := s.File(name)
	if err != nil {
		return nil, err
	}
	return f.Array(name, be, copy)
}

// Metadata merges the shards' __metadata__ maps (on a conflicting key the
// first shard in path order wins); writers repeat the same map in every
// shard, so this is usually just that map. Nil when no shard has one.
func (s *Set) Metadata() map[string]string {
	var out map[string]string
	for _, f := range s.files {
		for k, v := range f.meta {
			if out == nil {
				out = map[string]string{}
			}
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	return out
}

// Close closes every shard and returns the errors met, if any.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
