package model_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// moeFixtures are the fixture folders whose models route tokens to
// experts.
var moeFixtures = []string{
	"qwen3_moe/f32", "qwen3_moe/bf16", "gemma4_moe/f32", "gemma4_moe/bf16",
	"generic_glm4_moe/f32", "deepseek_v3/f32", "deepseek_v3_yarn/f32", "glm_moe_dsa/f32",
	"qwen3_5_moe/f32", "qwen3_next/f32",
}

// sameBits fails unless got and want hold the same float32 bit patterns.
func sameBits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d positions, want %d", what, len(got), len(want))
	}
	for p := range want {
		for i := range want[p] {
			if math.Float32bits(got[p][i]) != math.Float32bits(want[p][i]) {
				t.Fatalf("%s: position %d logit %d: %v, resident %v", what, p, i, got[p][i], want[p][i])
			}
		}
	}
}

// batchLogits runs rows (equal lengths) as one [B, T] pass and returns
// the float32 logits flattened.
func batchLogits(t *testing.T, m model.Model, rows [][]int32) []float32 {
	t.Helper()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	sc := tensor.NewScope()
	defer sc.Close()
	n := len(rows[0])
	raw := make([]byte, 4*n*len(rows))
	for r, row := range rows {
		for i, v := range row {
			binary.LittleEndian.PutUint32(raw[4*(r*n+i):], uint32(v))
		}
	}
	h, err := m.Forward(tensor.FromBytes(raw, []int{len(rows), n}, tensor.Int32), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Logits(h)
	if err != nil {
		t.Fatal(err)
	}
	return f32s(t, l)
}

func TestExpertStreamingMatchesResident(t *testing.T) {
	for _, fx := range moeFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := filepath.Join("testdata", fx)
			g := readGolden(t, filepath.Dir(dir))
			prompt := g.Prompt
			if len(prompt) > 12 {
				prompt = prompt[:12]
			}
			res, err := model.Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			if _, ok := res.(*model.Loaded).ExpertStats(); ok {
				t.Fatal("a resident model reports expert streaming")
			}
			whole := prefillLogits(t, res, prompt, 0)
			chunked := prefillLogits(t, res, prompt, 3)
			greedy, err := modeltest.Greedy(res, prompt[:4], 6, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows := [][]int32{prompt[:6], prompt[6:12]}
			batch := batchLogits(t, res, rows)

			// the size of every streamed expert, from an unbounded load
			probe, err := model.Load(dir, &model.LoadOptions{Experts: &model.ExpertStreaming{CacheBytes: math.MaxInt64}})
			if err != nil {
				t.Fatal(err)
			}
			st, _ := probe.(*model.Loaded).ExpertStats()
			probe.Close()
			if st.Experts == 0 || st.TotalBytes == 0 {
				t.Fatalf("no experts streamed: %+v", st)
			}
			one := st.TotalBytes / int64(st.Experts)
			for _, c := range []struct {
				budget            int64
				perBank, prefetch bool
			}{{0, false, false}, {3 * one, false, false}, {st.TotalBytes / 4, false, false}, {st.TotalBytes / 4, true, false},
				{st.TotalBytes / 2, false, true}, {math.MaxInt64, false, false}} {
				budget := c.budget
				live := tensor.LiveArrays()
				m, err := model.Load(dir, &model.LoadOptions{Experts: &model.ExpertStreaming{CacheBytes: budget, Workers: 2, PerBank: c.perBank, Prefetch: c.prefetch}})
				if err != nil {
					t.Fatal(err)
				}
				lm := m.(*model.Loaded)
				sameBits(t, "whole prefill", prefillLogits(t, m, prompt, 0), whole)
				sameBits(t, "chunked prefill", prefillLogits(t, m, prompt, 3), chunked)
				got, err := modeltest.Greedy(m, prompt[:4], 6, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				equalIDs(t, "greedy", got, greedy)
				sameBits(t, "batch", [][]float32{batchLogits(t, m, rows)}, [][]float32{batch})
				s, ok := lm.ExpertStats()
				if !ok {
					t.Fatal("no expert stats")
				}
				if s.Misses == 0 || s.BytesRead == 0 || s.Blocks == 0 {
					t.Errorf("budget %d: nothing read: %+v", budget, s)
				}
				if s.ResidentBytes > budget {
					t.Errorf("budget %d: %d bytes resident after the passes", budget, s.ResidentBytes)
				}
				if budget == math.MaxInt64 {
					if s.BytesRead > s.TotalBytes || s.Evictions != 0 {
						t.Errorf("unbounded cache read %d of %d bytes, evicted %d", s.BytesRead, s.TotalBytes, s.Evictions)
					}
					if s.Hits == 0 {
						t.Errorf("unbounded cache: no hits after repeated passes: %+v", s)
					}
				} else if s.Evictions == 0 && s.BytesRead >= s.TotalBytes {
					t.Errorf("budget %d: nothing evicted: %+v", budget, s)
				}
				if c.prefetch && moeLayers(t, dir) > 1 && s.Prefetched == 0 {
					t.Errorf("prefetch read nothing ahead: %+v", s)
				}
				if budget == 0 && s.Hits != 0 {
					t.Errorf("budget 0: %d hits (nothing should stay resident between blocks)", s.Hits)
				}
				t.Logf("budget %d of %d (per bank %v, prefetch %d used %d): hits %d misses %d read %d evictions %d peak %d", budget, s.TotalBytes, c.perBank, s.Prefetched, s.PrefetchUsed, s.Hits, s.Misses, s.BytesRead, s.Evictions, s.PeakResidentBytes)
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				if d := tensor.LiveArrays() - live; d != 0 {
					t.Errorf("budget %d: %d arrays leaked", budget, d)
				}
			}
		})
	}
}

// moeLayers counts a fixture's MoE layers by their router weights.
func moeLayers(t *testing.T, dir string) int {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	n := 0
	for _, name := range set.Names() {
		if strings.HasSuffix(name, ".mlp.gate.weight") {
			n++
		}
	}
	return n
}
