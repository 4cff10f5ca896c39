package generate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestBatchRestoreNamespace: BatchOptions.Restore is told each row's
// cache namespace (Options.CacheNamespace), so that state computed under
// one namespace can be kept from rows of another; a row whose namespace
// the hook declines prefills in full.
func TestBatchRestoreNamespace(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	defer tensortest.NoLeaks(t)()
	pool := poolFor(t, m, 4, 32)
	defer pool.Free()
	type call struct {
		ns   string
		held int
	}
	var calls []call
	restore := func(ns string, prompt []int32, caches []kv.Cache, held int) (int, error) {
		calls = append(calls, call{ns, held})
		return held, nil
	}
	b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 4, TokenBudget: 64, Pool: pool, NoPrefixReuse: true, Restore: restore})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prompt := []int32{5, 6, 7, 8, 9, 10, 11, 12}
	for _, ns := range []string{"", "sha256:aa", "x#3"} {
		if _, err := b.Add(context.Background(), prompt, &generate.Options{MaxTokens: 2, CacheNamespace: ns}); err != nil {
			t.Fatal(err)
		}
	}
	for steps := 0; !b.Idle(); steps++ {
		if steps > 100 {
			t.Fatal("batch did not finish")
		}
		if _, err := b.Step(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.ns)
		if c.held != 0 {
			t.Errorf("namespace %q: restore told %d tokens held (no prefix reuse: want 0)", c.ns, c.held)
		}
	}
	slices.Sort(got)
	if want := []string{"", "sha256:aa", "x#3"}; !slices.Equal(got, want) {
		t.Errorf("Restore saw namespaces %q, want %q", got, want)
	}
	if st := b.Stats(); st.CachedTokens != 0 {
		t.Errorf("%d cached tokens, want none (the hook restored nothing)", st.CachedTokens)
	}
}
