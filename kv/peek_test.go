package kv

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestPeek: Peek reads a file's token ids and metadata without checking
// its arrays, so a flipped byte in an array passes Peek and is caught by
// Load, while one in the token ids or the index is refused by Peek too.
func TestPeek(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 3))
	c := NewKVCache()
	k, v := tokens(r, 5)
	tensor.Free(write(c, k, v)...)
	tensor.Free(k, v)
	path := filepath.Join(t.TempDir(), "c.kvc")
	toks := []int32{9, 8, 7, 6, 5}
	if err := Save(path, []Cache{c}, toks, Meta{ModelID: "m@1", Extra: map[string]string{"scheme": "plain"}}); err != nil {
		t.Fatal(err)
	}
	c.Free()
	got, meta, err := Peek(path)
	if err != nil || !slices.Equal(got, toks) || meta.ModelID != "m@1" || meta.Extra["scheme"] != "plain" {
		t.Fatalf("peek: %v %+v %v", got, meta, err)
	}
	raw, _ := os.ReadFile(path)
	idx, err := parseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(at int64) string {
		b := slices.Clone(raw)
		b[at] ^= 0x40
		p := filepath.Join(t.TempDir(), "bad.kvc")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := flip(idx.Caches[0].Arrays[0].Offset + 3)
	if _, _, err := Peek(bad); err != nil {
		t.Errorf("an array byte flipped: Peek refused it (%v); it checks no arrays", err)
	}
	if s, err := Load(bad, Expect{}); !errors.Is(err, ErrCorrupt) {
		if s != nil {
			s.Free()
		}
		t.Errorf("an array byte flipped: Load gave %v, want ErrCorrupt", err)
	}
	if _, _, err := Peek(flip(idx.Tokens.Offset + 1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a token byte flipped: Peek gave %v, want ErrCorrupt", err)
	}
}
