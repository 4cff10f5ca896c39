package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func u8(name string, vals ...byte) Tensor {
	return Tensor{Name: name, DType: tensor.Uint8, Shape: []int{len(vals)}, Data: vals}
}

func writeFile(t *testing.T, path string, meta map[string]string, ts ...Tensor) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, ts, meta); err != nil {
		t.Fatal(err)
	}
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const twoShardIndex = `{"metadata":{"total_size":5},"weight_map":{
	"a":"model-00001-of-00002.safetensors",
	"b":"model-00001-of-00002.safetensors",
	"c":"model-00002-of-00002.safetensors"}}`

func shardedDir(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), map[string]string{"format": "mlx"}, u8("a", 1, 2), u8("b", 3))
	writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), map[string]string{"format": "mlx", "extra": "x"}, u8("c", 4, 5))
	writeText(t, filepath.Join(dir, IndexName), twoShardIndex)
	return dir
}

func TestSetIndexed(t *testing.T) {
	dir := shardedDir(t)
	// A stray file the index does not name must be ignored.
	writeFile(t, filepath.Join(dir, "adapters.safetensors"), nil, u8("a", 9))
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %v", got)
	}
	if len(s.Files()) != 2 || s.Len() != 3 {
		t.Errorf("%d files, %d tensors", len(s.Files()), s.Len())
	}
	want := map[string][]byte{"a": {1, 2}, "b": {3}, "c": {4, 5}}
	live := tensor.LiveArrays()
	for name, data := range want {
		if b, err := s.Bytes(name); err != nil || !bytes.Equal(b, data) {
			t.Errorf("Bytes(%s) = %v, %v", name, b, err)
		}
		info, err := s.Info(name)
		if err != nil || info.DType != tensor.Uint8 || !slices.Equal(info.Shape, []int{len(data)}) {
			t.Errorf("Info(%s) = %+v, %v", name, info, err)
		}
		a, err := s.Array(name, testBE, false)
		if err != nil || !bytes.Equal(a.Bytes(), data) {
			t.Errorf("Array(%s) = %v, %v", name, a, err)
		}
		a.Free()
	}
	if tensor.LiveArrays() != live {
		t.Error("arrays leaked")
	}
	f, _ := s.File("c")
	if filepath.Base(f.Path()) != "model-00002-of-00002.safetensors" {
		t.Errorf("c is in %s", f.Path())
	}
	if m := s.Metadata(); m["format"] != "mlx" || m["extra"] != "x" || len(m) != 2 {
		t.Errorf("Metadata = %v", m)
	}
	if _, err := s.Info("zzz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info(zzz) = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bytes("a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Bytes after Close = %v", err)
	}
}

func TestSetWithoutIndex(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "one.safetensors"), nil, u8("x", 1))
	writeFile(t, filepath.Join(dir, "two.safetensors"), nil, u8("y", 2))
	writeText(t, filepath.Join(dir, "._one.safetensors"), "macOS resource fork, not a checkpoint")
	writeText(t, filepath.Join(dir, "config.json"), "{}")
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("Names = %v", got)
	}
	s.Close()

	// model.safetensors wins over other files.
	writeFile(t, filepath.Join(dir, SingleName), nil, u8("w", 3))
	s, err = OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"w"}) {
		t.Errorf("Names = %v", got)
	}
	s.Close()

	// A file path opens that file alone.
	s, err = OpenDir(filepath.Join(dir, "two.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"y"}) {
		t.Errorf("Names = %v", got)
	}
	s.Close()
}

func TestSetErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // substrings of the error
	}{
		{"empty dir", func(t *testing.T, dir string) {}, []string{"no model.safetensors.index.json"}},
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, []string{IndexName, `tensor "c"`, `"model-00002-of-00002.safetensors", which cannot be opened`}},
		{"tensor absent from shard", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), nil, u8("d", 1))
		}, []string{IndexName, `tensor "c"`, "absent"}},
		{"tensor in the wrong shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`)
		}, []string{`tensor "a"`, "listed in the index under shard", "but stored in", "model-00001-of-00002.safetensors"}},
		{"tensor in two shards", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), nil, u8("c", 1), u8("b", 2))
		}, []string{`tensor "b"`, "also stored in shard"}},
		{"two shards without index", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, IndexName))
			writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), nil, u8("a", 1))
		}, []string{`tensor "a"`, "also stored in shard"}},
		{"escaping shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":"../model-00001-of-00002.safetensors"}}`)
		}, []string{`tensor "a"`, "escapes the checkpoint directory"}},
		{"absolute shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":"`+filepath.ToSlash(filepath.Join(dir, "model-00001-of-00002.safetensors"))+`"}}`)
		}, []string{"escapes"}},
		{"sneaky escape", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":"sub/../../x.safetensors"}}`)
		}, []string{"escapes"}},
		{"index without weight_map", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"metadata":{}}`)
		}, []string{"no weight_map"}},
		{"index not JSON", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":`)
		}, []string{IndexName, "invalid JSON"}},
		{"index weight_map array", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":[]}`)
		}, []string{"weight_map is an array"}},
		{"index shard number", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":1}}`)
		}, []string{`tensor "a"`, "weight_map value is a number"}},
		{"index duplicate", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexName), `{"weight_map":{"a":"model-00001-of-00002.safetensors","a":"model-00002-of-00002.safetensors"}}`)
		}, []string{`tensor "a"`, "listed twice"}},
		{"corrupt shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), "short")
		}, []string{"model-00002-of-00002.safetensors", "shorter than"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.name != "empty dir" {
				dir = shardedDir(t)
			}
			c.setup(t, dir)
			s, err := OpenDir(dir)
			if err == nil {
				s.Close()
				t.Fatalf("accepted: %v", s.Names())
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := OpenDir(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}
