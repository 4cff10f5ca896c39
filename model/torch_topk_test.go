package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTorchTopKTies: torchTopK returns what torch.topk returned on the
// CPU (tools/oracle/topk_ties.py), order and tied picks included, for
// rows shaped like DSA's (a causal prefix then float32's lowest) and for
// rows of few distinct values, on both sides of torch's partial-sort
// switch.
func TestTorchTopKTies(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "topk_ties.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Torch string
		Cases []struct {
			Values  []float64
			K       int
			Indices []int
		}
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("no cases")
	}
	tied := 0
	for ci, c := range g.Cases {
		vals := make([]float32, len(c.Values))
		for i, v := range c.Values {
			vals[i] = float32(v)
		}
		got := torchTopK(vals, c.K)
		if !slices.Equal(got, c.Indices) {
			t.Errorf("case %d (n %d, k %d): got %v, torch %v", ci, len(vals), c.K, got, c.Indices)
		}
		// the cases where lowest-index-first would pick differently
		lowest := make([]int, len(vals))
		for i := range lowest {
			lowest[i] = i
		}
		slices.SortStableFunc(lowest, func(a, b int) int {
			switch {
			case vals[a] > vals[b]:
				return -1
			case vals[a] < vals[b]:
				return 1
			}
			return 0
		})
		a, b := slices.Clone(lowest[:c.K]), slices.Clone(c.Indices)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			tied++
		}
	}
	t.Logf("torch %s: %d cases, %d where torch's tie picks differ from lowest-index-first", g.Torch, len(g.Cases), tied)
	if tied == 0 {
		t.Error("no case exercises torch's tie order")
	}
}

// TestTorchTopKMaskedTail: the keys torch picks among tied scores depend
// on how many masked (lowest-valued) entries follow them. That is why
// HF's DSA, which scores every query against the whole sequence with the
// future masked, is not causal where the indexer ties at the top-k cut,
// and why no cache can follow HF's full recomputation there.
func TestTorchTopKMaskedTail(t *testing.T) {
	prefix := []float32{0, 0.5, 0, 0, 1, 0, 0, 0, 0, 0.25, 0, 0}
	seen := map[string]int{}
	for tail := 0; tail < 16; tail++ {
		row := append(slices.Clone(prefix), slices.Repeat([]float32{-math.MaxFloat32}, tail)...)
		got := torchTopK(row, 8)
		slices.Sort(got)
		key, _ := json.Marshal(got)
		seen[string(key)]++
	}
	if len(seen) < 2 {
		t.Errorf("the same keys whatever the masked tail: %v", seen)
	}
	t.Logf("selections over tails of 0..15 masked keys: %v", seen)
}
