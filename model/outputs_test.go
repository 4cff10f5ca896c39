package model_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestForwardOutputsExact: on every fixture checkpoint (each architecture,
// float32 and bfloat16), a pass asked for some positions only
// (ForwardOptions.Outputs: the last layer's feed-forward runs on them
// alone) returns exactly those positions of the full pass, bit for bit,
// without caches and at a cache offset; and the caches it leaves hold the
// same keys and values (the next pass's outputs match too).
func TestForwardOutputsExact(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		if strings.Contains(dir, "assistant") {
			continue // a drafter: no Forward of its own (gemma4_assistant_test.go)
		}
		t.Run(strings.TrimPrefix(dir, "testdata/"), func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			m, err := model.Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			vocab := m.Info().Vocab
			ids := func(n, seed int) *tensor.Array {
				p := make([]int32, n)
				for i := range p {
					p[i] = int32(3 + (i*31+seed*7)%(vocab-3))
				}
				return tensor.FromInt32(p, []int{1, n})
			}
			const first, second = 6, 9
			for _, pos := range [][]int32{{second - 1}, {0, 4, second - 1}, {2}} {
				full := m.MakeCaches()
				part := m.MakeCaches()
				// a first chunk fills both caches alike
				for _, c := range [][]kv.Cache{full, part} {
					in := ids(first, 1)
					h, err := m.Forward(in, c, nil)
					if err != nil {
						t.Fatal(err)
					}
					tensor.Free(in, h)
				}
				in := ids(second, 2)
				hf, err := m.Forward(in, full, nil)
				if err != nil {
					t.Fatal(err)
				}
				hp, err := m.Forward(in, part, &model.ForwardOptions{Outputs: pos})
				if err != nil {
					t.Fatal(err)
				}
				idx := tensor.FromInt32(pos, []int{len(pos)})
				want := tensor.Take(hf, idx, 1)
				if !slices.Equal(hp.Shape(), want.Shape()) || !bytes.Equal(hp.Bytes(), want.Bytes()) {
					t.Fatalf("outputs %v at offset %d: not the full pass's rows (shape %v, want %v)", pos, first, hp.Shape(), want.Shape())
				}
				// the caches hold the same: a next step gives the same bits
				next := ids(1, 3)
				nf, err := m.Forward(next, full, nil)
				if err != nil {
					t.Fatal(err)
				}
				np, err := m.Forward(next, part, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(nf.Bytes(), np.Bytes()) {
					t.Fatalf("outputs %v: the next step after differs from the full pass's", pos)
				}
				// and without caches
				nc, err := m.Forward(in, nil, &model.ForwardOptions{Outputs: pos})
				if err != nil {
					t.Fatal(err)
				}
				fc, err := m.Forward(in, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				wc := tensor.Take(fc, idx, 1)
				if !bytes.Equal(nc.Bytes(), wc.Bytes()) {
					t.Fatalf("outputs %v without caches: not the full pass's rows", pos)
				}
				tensor.Free(in, idx, hf, hp, want, next, nf, np, nc, fc, wc)
				model.FreeCaches(full)
				model.FreeCaches(part)
			}
		})
	}
}

// TestForwardOutputsRefused: positions that are not increasing, or fall
// outside the pass, are an argument error and no output.
func TestForwardOutputsRefused(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	m, err := model.Load(writeRandomLlama(t, 0.05), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := tensor.FromInt32([]int32{5, 6, 7, 8}, []int{1, 4})
	defer in.Free()
	for _, pos := range [][]int32{{4}, {-1}, {2, 1}, {1, 1}} {
		h, err := m.Forward(in, nil, &model.ForwardOptions{Outputs: pos})
		if !errors.Is(err, tensor.ErrArgument) || h != nil {
			t.Errorf("outputs %v of a 4-token pass: got %v, %v; want an argument error", pos, h, err)
			h.Free()
		}
	}
}
