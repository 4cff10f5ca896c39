package generate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// biasModel is a RowForwarder stand-in for an adapted model: a row whose
// adapter set is ["favour"] gets +100 on token fav's logit (so it always
// greedily picks fav); other rows run the base model. It checks each
// pass's row spans against the tokens it is given.
type biasModel struct {
	generate.Model
	t   *testing.T
	fav int
}

func (m *biasModel) ForwardRows(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan) (*tensor.Array, error) {
	n := 0
	for _, r := range rows {
		n += r.Tokens
	}
	if n != ids.Dim(1) {
		m.t.Errorf("row spans cover %d tokens of a %d-token pass", n, ids.Dim(1))
	}
	return m.Forward(ids, caches)
}

func (m *biasModel) LogitsRows(h *tensor.Array, rows []generate.RowSpan) (*tensor.Array, error) {
	if len(rows) != h.Dim(1) {
		m.t.Errorf("%d logit spans for %d positions", len(rows), h.Dim(1))
	}
	l, err := m.Logits(h)
	if err != nil {
		return nil, err
	}
	v := m.VocabSize()
	bias := make([]float32, len(rows)*v)
	for i, r := range rows {
		if slices.Equal(r.Adapters, []string{"favour"}) {
			bias[i*v+m.fav] = 100
		}
	}
	return tensor.Add(l, tensor.AsType(tensor.FromFloat32(bias, []int{1, len(rows), v}, tensor.Float32), l.DType())), nil
}

// TestBatchRowAdapters: rows with an adapter set run through the model's
// RowForwarder with one span per row (the rows beside them unaffected);
// adapters on a model without one are refused.
func TestBatchRowAdapters(t *testing.T) {
	base := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	m := &biasModel{Model: base, t: t, fav: 7}
	b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 4, TokenBudget: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prompt := []int32{3, 4, 5, 6, 8, 9}
	plain, err := b.Add(context.Background(), prompt, &generate.Options{MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	fav, err := b.Add(context.Background(), prompt, &generate.Options{MaxTokens: 5, Adapters: []string{"favour"}, CacheNamespace: "favour"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[*generate.Row][]int32{}
	for !b.Idle() {
		evs, err := b.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			for _, tk := range ev.Tokens {
				got[ev.Row] = append(got[ev.Row], tk.ID)
			}
		}
	}
	want, _, err := collect(t, base, prompt, &generate.Options{MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[plain], want) {
		t.Errorf("the base row beside an adapted one: %v, alone %v", got[plain], want)
	}
	if !slices.Equal(got[fav], []int32{7, 7, 7, 7, 7}) {
		t.Errorf("the adapted row: %v", got[fav])
	}
	b2, err := generate.NewBatch(base, generate.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if _, err := b2.Add(context.Background(), prompt, &generate.Options{Adapters: []string{"x"}}); err == nil {
		t.Error("adapters on a model without a RowForwarder were accepted")
	}
}

// TestBatchPrefillRows: three prompts added at once share the first pass
// under a budget that holds them all, or go one per pass, first come first
// served, with PrefillRows 1 (the rows already in decoding beside each);
// every row generates what it generates alone either way.
func TestBatchPrefillRows(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	prompt := func(k int) []int32 {
		p := make([]int32, 20)
		for i := range p {
			p[i] = int32((i*7 + 3 + k*31) % m.VocabSize())
		}
		return p
	}
	for _, cap := range []int{0, 1} {
		b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 4, TokenBudget: 256, PrefillRows: cap})
		if err != nil {
			t.Fatal(err)
		}
		var rows []*generate.Row
		for k := range 3 {
			r, err := b.Add(context.Background(), prompt(k), &generate.Options{MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
		got := map[*generate.Row]*solo{}
		var first []int // the step of each row's first token
		var passes []int
		for step := 0; !b.Idle(); step++ {
			evs, err := b.Step()
			if err != nil {
				t.Fatal(err)
			}
			passes = append(passes, b.Stats().LastStepTokens)
			for _, ev := range evs {
				if len(ev.Tokens) > 0 && got[ev.Row] == nil {
					first = append(first, step)
					got[ev.Row] = &solo{}
				}
				if len(ev.Tokens) > 0 {
					got[ev.Row].add(ev.Tokens)
				}
			}
		}
		b.Close()
		want := []int{0, 0, 0}
		if cap == 1 {
			want = []int{0, 1, 2}
		}
		if !slices.Equal(first, want) {
			t.Errorf("PrefillRows %d: first tokens at steps %v, want %v (passes of %v tokens)", cap, first, want, passes)
		}
		if cap == 1 && (passes[0] != 20 || passes[1] != 21 || passes[2] != 22) {
			t.Errorf("PrefillRows 1: passes of %v tokens, want 20, 21, 22 first (one prompt and the decoding rows)", passes)
		}
		for k, r := range rows {
			alone := runSolo(t, m, prompt(k), generate.Options{MaxTokens: 4})
			if g := got[r]; g == nil || !slices.Equal(g.ids, alone.ids) || !slices.Equal(g.lps, alone.lps) {
				t.Errorf("PrefillRows %d: row %d generated %v, alone %v (logprob bits equal: %v)", cap, k, g, alone.ids, g != nil && slices.Equal(g.lps, alone.lps))
			}
		}
	}
}
