package kv

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// filledCaches returns one cache of every kind with random contents
// (rotating ones wrapped past their window), plus an empty one.
func filledCaches(t *testing.T, r *rand.Rand) []Cache {
	t.Helper()
	var cs []Cache
	for _, m := range makers {
		c := m.make()
		for range 6 {
			k, v := tokens(r, 1+r.IntN(25))
			c.UpdateAndFetch(k, v)
			tensor.Free(k, v)
		}
		cs = append(cs, c)
	}
	small := NewRotatingKVCache(8, 0)
	for range 11 {
		k, v := tokens(r, 1)
		small.UpdateAndFetch(k, v)
		tensor.Free(k, v)
	}
	return append(cs, small, NewKVCache())
}

func saveTemp(t *testing.T, cs []Cache, tokens []int32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.kv")
	if err := Save(path, cs, tokens, Meta{ModelID: "tiny-llama@abc", Extra: map[string]string{"template": "v1"}}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPersistRoundTrip: saved and loaded caches have bit-identical states,
// token ids and metadata, the file's arrays are page-aligned, and further
// writes fetch exactly what they fetch on the originals.
func TestPersistRoundTrip(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 1))
	cs := filledCaches(t, r)
	toks := []int32{1, 2, 3, -7, 1 << 30}
	path := saveTemp(t, cs, toks)
	got, err := Load(path, Expect{ModelID: "tiny-llama@abc", Layers: len(cs)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, toks) || got.Meta.ModelID != "tiny-llama@abc" || got.Meta.Extra["template"] != "v1" {
		t.Fatalf("tokens %v, meta %+v", got.Tokens, got.Meta)
	}
	for i, c := range cs {
		a, b := c.State(), got.Caches[i].State()
		sameState(t, a, b)
		a.Free()
		b.Free()
		if c.Offset() == 0 {
			continue
		}
		k, v := tokens(r, 1+r.IntN(3))
		ga, gb := write(c, k, v), write(got.Caches[i], k, v)
		sameAll(t, "write after load", ga, gb)
		tensor.Free(ga...)
		tensor.Free(gb...)
		tensor.Free(k, v)
	}
	raw, _ := os.ReadFile(path)
	idx, err := parseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range idx.Caches {
		for _, a := range c.Arrays {
			if a.Offset%pageSize != 0 {
				t.Fatalf("array at %d is not page-aligned", a.Offset)
			}
		}
	}
	got.Free()
	for _, c := range cs {
		c.Free()
	}
}

// TestPersistRefuses: damaged and mismatched files are refused with the
// named error, never loaded and never a panic.
func TestPersistRefuses(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 2))
	cs := filledCaches(t, r)
	path := saveTemp(t, cs, []int32{5, 6})
	for _, c := range cs {
		c.Free()
	}
	good, _ := os.ReadFile(path)
	idx, err := parseFile(good)
	if err != nil {
		t.Fatal(err)
	}
	firstArray := idx.Caches[0].Arrays[0]
	indexOff := int64(binary.LittleEndian.Uint64(good[len(good)-trailerSize:]))
	mutate := func(f func(b []byte) []byte) string {
		b := f(append([]byte(nil), good...))
		p := filepath.Join(t.TempDir(), "bad.kv")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		path string
		want Expect
		err  error
	}{
		{"flipped data byte", mutate(func(b []byte) []byte { b[firstArray.Offset+3] ^= 0x10; return b }), Expect{}, ErrCorrupt},
		{"flipped token byte", mutate(func(b []byte) []byte { b[idx.Tokens.Offset] ^= 1; return b }), Expect{}, ErrCorrupt},
		{"flipped index byte", mutate(func(b []byte) []byte { b[indexOff+5] ^= 1; return b }), Expect{}, ErrCorrupt},
		{"truncated", mutate(func(b []byte) []byte { return b[:len(b)-100] }), Expect{}, ErrTruncated},
		{"truncated to the header", mutate(func(b []byte) []byte { return b[:16] }), Expect{}, ErrTruncated},
		{"empty", mutate(func(b []byte) []byte { return nil }), Expect{}, ErrNotCacheFile},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), Expect{}, ErrNotCacheFile},
		{"future version", mutate(func(b []byte) []byte { b[8] = 9; return b }), Expect{}, ErrVersion},
		{"other model", path, Expect{ModelID: "other"}, ErrModelMismatch},
		{"other layer count", path, Expect{Layers: 3}, ErrLayerMismatch},
	}
	for _, tc := range cases {
		s, err := Load(tc.path, tc.want)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if s != nil {
			t.Errorf("%s: loaded anyway", tc.name)
			s.Free()
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), Expect{}); err == nil {
		t.Error("loaded a missing file")
	}
}

// TestLoadedCacheOutlivesOthers: the mapping stays while any loaded cache
// (or a clone of one) is alive, and a loaded cache's first write copies
// out of it instead of writing to the file.
func TestLoadedCacheOutlivesOthers(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 3))
	cs := filledCaches(t, r)
	path := saveTemp(t, cs, nil)
	before, _ := os.ReadFile(path)
	s, err := Load(path, Expect{})
	if err != nil {
		t.Fatal(err)
	}
	keepIdx := 1 // the rotating cache: in-place writes into borrowed memory
	clone := s.Caches[keepIdx].Clone()
	for i, c := range s.Caches {
		if i != keepIdx {
			c.Free()
		}
	}
	s.Caches[keepIdx].Free()
	// only the clone holds the mapping now
	k, v := tokens(r, 1)
	tensor.Free(write(clone, k, v)...)
	tensor.Free(k, v)
	st := clone.State()
	_ = st.Arrays[0].Bytes()
	st.Free()
	clone.Free()
	for _, c := range cs {
		c.Free()
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("writing to a loaded cache changed the file")
	}
}
