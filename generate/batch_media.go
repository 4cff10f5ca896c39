package generate

import (
	"context"
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// EmbedForwarder runs a forward pass in which some positions take
// precomputed embeddings (images', audio clips' soft tokens) instead of
// their tokens': emb [1, T, D] where mask [1, T] (bool) is true. ids
// already hold, at those positions, the id the model looks up there (a
// pad id). Elsewhere the result must equal Forward's bit for bit.
type EmbedForwarder interface {
	ForwardEmbeds(ids *tensor.Array, caches []kv.Cache, emb, mask *tensor.Array) (*tensor.Array, error)
}

// RowEmbedForwarder is a RowForwarder whose per-row passes also take
// prompt embeddings: ForwardRowsEmbeds is ForwardRows with emb [1, T, D]
// taken where mask [1, T] is true, as EmbedForwarder's ForwardEmbeds
// takes them. A Batch over such a model admits rows with embeddings
// (AddEmbeds) and runs them with or beside rows with adapter sets, each
// row computing what it computes alone with its own set.
type RowEmbedForwarder interface {
	RowForwarder
	ForwardRowsEmbeds(ids *tensor.Array, caches []kv.Cache, rows []RowSpan, emb, mask *tensor.Array) (*tensor.Array, error)
}

// RowEmbeds is a batch row's prompt embeddings (AddEmbeds): the
// positions of its prompt whose token embeddings are replaced.
type RowEmbeds struct {
	// Embeddings [1, L, D] over the prompt's L positions (only those
	// Mask marks are read), in the model's activation dtype.
	Embeddings *tensor.Array
	// Mask marks the positions taken from Embeddings (len L).
	Mask []bool
	// Pad is the id fed at those positions.
	Pad int32
	// Forwarder runs the passes this row is in, when the batch's model is
	// no EmbedForwarder itself (the same weights: rows without
	// embeddings must come out as Forward makes them).
	Forwarder EmbedForwarder
}

// AddEmbeds is Add for a row whose prompt carries embeddings: each pass
// over its prompt positions takes their rows from e (spliced over the
// placeholder rows), so media requests join the batch instead of running
// alone, each row's result equal to its run alone. The caller keeps e's
// arrays alive until the row is done. Prefix reuse keys on token ids
// within Options.CacheNamespace: rows whose placeholder ids stand for
// different media must use different namespaces (a hash of the media),
// or set the batch's NoPrefixReuse.
func (b *Batch) AddEmbeds(ctx context.Context, prompt []int32, opts *Options, e *RowEmbeds) (*Row, error) {
	if e == nil || e.Embeddings == nil {
		return nil, errors.New("generate: AddEmbeds without embeddings")
	}
	if e.Embeddings.NDim() != 3 || e.Embeddings.Dim(0) != 1 || e.Embeddings.Dim(1) != len(prompt) || len(e.Mask) != len(prompt) {
		return nil, fmt.Errorf("generate: row embeddings %v and mask of %d for a %d-token prompt", e.Embeddings.Shape(), len(e.Mask), len(prompt))
	}
	_, rows := b.m.(RowForwarder)
	_, rowEmbeds := b.m.(RowEmbedForwarder)
	if rows && !rowEmbeds {
		return nil, errors.New("generate: rows with embeddings need a model whose per-row passes take them (a RowEmbedForwarder), or one without per-row adapters")
	}
	if _, ok := b.m.(EmbedForwarder); !ok && e.Forwarder == nil && !rowEmbeds {
		return nil, errors.New("generate: rows with embeddings need an EmbedForwarder (the model or RowEmbeds.Forwarder)")
	}
	if opts != nil && opts.Speculation != nil {
		return nil, errors.New("generate: rows with embeddings do not decode speculatively")
	}
	r, err := b.Add(ctx, prompt, opts)
	if err != nil {
		return nil, err
	}
	r.embeds = e
	return r, nil
}

// forwardPass is the pass's forward: the model's Forward (rf's
// ForwardRows when rows have adapter sets: rf and spans from rowSpans),
// or, when a segment covers prompt positions of a row with embeddings,
// its EmbedForwarder (a RowEmbedForwarder's ForwardRowsEmbeds when rows
// have adapter sets) with every such row's embeddings spliced in at their
// place in the pass (pad ids under them). outputs, when set, are the only
// positions the caller reads: a plain pass (no adapters, no embeddings)
// returns their hidden states alone (ForwardOutputs); the others return
// every position's.
func (b *Batch) forwardPass(in *tensor.Array, ids []int32, caches []kv.Cache, segs []segment, rf RowForwarder, spans []RowSpan, outputs []int32) (*tensor.Array, error) {
	var fw EmbedForwarder
	at := 0
	type piece struct {
		at, from, n int
		e           *RowEmbeds
	}
	var pieces []piece
	for _, s := range segs {
		if e := s.r.embeds; e != nil {
			pos := rowOffset(s.r.caches)
			if n := min(len(s.ids), len(e.Mask)-pos); n > 0 && pos >= 0 {
				for i := range n {
					if e.Mask[pos+i] {
						pieces = append(pieces, piece{at: at, from: pos, n: n, e: e})
						if fw == nil {
							fw = e.Forwarder
						}
						break
					}
				}
			}
		}
		at += len(s.ids)
	}
	if len(pieces) == 0 {
		if rf != nil {
			return rf.ForwardRows(in, caches, spans)
		}
		if outputs != nil {
			return ForwardOutputs(b.m, in, caches, outputs)
		}
		return b.m.Forward(in, caches)
	}
	ref, _ := b.m.(RowEmbedForwarder)
	if rf != nil && ref == nil {
		return nil, errors.New("generate: a pass with embeddings and adapter sets on a model that takes no embeddings per row (no RowEmbedForwarder)")
	}
	if f, ok := b.m.(EmbedForwarder); ok {
		fw = f
	}
	if rf == nil && fw == nil && ref != nil {
		// no plain EmbedForwarder: the per-row pass, every row unadapted
		for _, s := range segs {
			spans = append(spans, RowSpan{Tokens: len(s.ids)})
		}
		rf = ref
	}
	t := len(ids)
	var emb, maskA, ids2 *tensor.Array
	err := tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		d := pieces[0].e.Embeddings.Dim(2)
		dt := pieces[0].e.Embeddings.DType()
		mask := make([]byte, t)
		pids := append([]int32(nil), ids...)
		var parts []*tensor.Array
		done := 0
		for _, p := range pieces {
			if p.at > done {
				parts = append(parts, tensor.FullOn(b.be, []int{1, p.at - done, d}, 0, dt))
			}
			parts = append(parts, tensor.AsType(tensor.SliceAxis(p.e.Embeddings, 1, p.from, p.from+p.n), dt))
			for i := range p.n {
				if p.e.Mask[p.from+i] {
					mask[p.at+i] = 1
					pids[p.at+i] = p.e.Pad
				}
			}
			done = p.at + p.n
		}
		if done < t {
			parts = append(parts, tensor.FullOn(b.be, []int{1, t - done, d}, 0, dt))
		}
		all := parts[0]
		if len(parts) > 1 {
			all = tensor.Concatenate(parts, 1)
		}
		emb = sc.Keep(all)
		maskA = sc.Keep(tensor.FromBytesOn(b.be, mask, []int{1, t}, tensor.Bool, false))
		ids2 = sc.Keep(tensor.FromInt32On(b.be, pids, []int{1, t}))
	})
	if err != nil {
		return nil, err
	}
	defer tensor.Free(emb, maskA, ids2)
	if rf != nil {
		return ref.ForwardRowsEmbeds(ids2, caches, spans, emb, maskA)
	}
	return fw.ForwardEmbeds(ids2, caches, emb, maskA)
}

// rowOffset is the position a row's next pass starts at (its caches'
// offset; 0 before any).
func rowOffset(caches []kv.Cache) int {
	for _, c := range caches {
		if c != nil {
			return c.Offset()
		}
	}
	return 0
}
