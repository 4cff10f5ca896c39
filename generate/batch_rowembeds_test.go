package generate_test

import (
	"context"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// embedModel is a model whose passes take prompt embeddings
// (model.ForwardOptions): an EmbedForwarder, the reference.
type embedModel struct {
	generate.Model
	m model.Model
}

func (e *embedModel) ForwardEmbeds(ids *tensor.Array, caches []kv.Cache, emb, mask *tensor.Array) (*tensor.Array, error) {
	return e.m.Forward(ids, caches, &model.ForwardOptions{Embeddings: emb, EmbedMask: mask})
}

// rowEmbedModel is biasModel (rows with adapter set ["favour"] always
// pick token fav) whose per-row passes also take embeddings: a
// RowEmbedForwarder counting the passes that carried them.
type rowEmbedModel struct {
	*biasModel
	m      model.Model
	embeds int
}

func (r *rowEmbedModel) ForwardRowsEmbeds(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan, emb, mask *tensor.Array) (*tensor.Array, error) {
	n := 0
	for _, s := range rows {
		n += s.Tokens
	}
	if n != ids.Dim(1) {
		r.t.Errorf("row spans cover %d tokens of a %d-token pass", n, ids.Dim(1))
	}
	r.embeds++
	return r.m.Forward(ids, caches, &model.ForwardOptions{Embeddings: emb, EmbedMask: mask})
}

// TestBatchRowEmbeds: a model that runs per-row adapter sets admits rows
// with prompt embeddings only as a RowEmbedForwarder; over one, a row
// with embeddings decodes beside rows with adapter sets (passes mixing
// both go through ForwardRowsEmbeds) with the tokens it gets alone over
// a plain EmbedForwarder, and rows with the set, embeddings or not, get
// its tokens.
func TestBatchRowEmbeds(t *testing.T) {
	m, err := model.Load(filepath.Join(fixtures, "llama3", "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	gm := generate.Wrap(m, m.Info().Vocab)
	prompt := []int32{3, 4, 5, 6, 8, 9, 10, 11}
	d := m.Info().Hidden
	rng := rand.New(rand.NewSource(7))
	v := make([]float32, len(prompt)*d)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	emb := tensor.FromFloat32(v, []int{1, len(prompt), d}, m.Info().DType)
	defer emb.Free()
	mask := []bool{false, false, true, true, true, false, false, false}
	re := &generate.RowEmbeds{Embeddings: emb, Mask: mask, Pad: 0}
	const n = 5
	run := func(b *generate.Batch, rows ...*generate.Row) map[*generate.Row][]int32 {
		t.Helper()
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
		return got
	}
	// alone, over a plain EmbedForwarder
	ref, err := generate.NewBatch(&embedModel{gm, m}, generate.BatchOptions{MaxRows: 4, TokenBudget: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	alone, err := ref.AddEmbeds(context.Background(), prompt, &generate.Options{MaxTokens: n, CacheNamespace: "media"}, re)
	if err != nil {
		t.Fatal(err)
	}
	want := run(ref)[alone]
	plain, _, err := collect(t, gm, prompt, &generate.Options{MaxTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(want, plain) {
		t.Fatalf("the embeddings do not change the greedy tokens (%v): the test cannot tell them apart", want)
	}

	// a RowForwarder that takes no embeddings per row refuses them
	nb, err := generate.NewBatch(&biasModel{Model: gm, t: t, fav: 7}, generate.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if _, err := nb.AddEmbeds(context.Background(), prompt, &generate.Options{MaxTokens: n}, re); err == nil {
		t.Error("AddEmbeds on a RowForwarder without RowEmbedForwarder was accepted")
	}

	rm := &rowEmbedModel{biasModel: &biasModel{Model: gm, t: t, fav: 7}, m: m}
	b, err := generate.NewBatch(rm, generate.BatchOptions{MaxRows: 4, TokenBudget: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	media, err := b.AddEmbeds(context.Background(), prompt, &generate.Options{MaxTokens: n, CacheNamespace: "media"}, re)
	if err != nil {
		t.Fatal(err)
	}
	mediaFav, err := b.AddEmbeds(context.Background(), prompt, &generate.Options{MaxTokens: n, Adapters: []string{"favour"}, CacheNamespace: "favour/media"}, re)
	if err != nil {
		t.Fatal(err)
	}
	fav, err := b.Add(context.Background(), prompt, &generate.Options{MaxTokens: n, Adapters: []string{"favour"}, CacheNamespace: "favour"})
	if err != nil {
		t.Fatal(err)
	}
	got := run(b)
	if !slices.Equal(got[media], want) {
		t.Errorf("the embeddings row beside adapter rows: %v, alone %v", got[media], want)
	}
	for name, r := range map[string]*generate.Row{"embeddings and the set": mediaFav, "the set": fav} {
		if !slices.Equal(got[r], []int32{7, 7, 7, 7, 7}) {
			t.Errorf("the row with %s: %v", name, got[r])
		}
	}
	if rm.embeds == 0 {
		t.Error("no pass went through ForwardRowsEmbeds")
	}
}
