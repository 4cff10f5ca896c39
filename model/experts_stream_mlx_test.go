package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestExpertStreamingMLX holds streamed experts on the MLX backend to the
// resident MLX model bit for bit (whole and chunked prefill, greedy ids)
// on every MoE fixture and on stacked 4-bit experts, at budgets of none,
// a quarter and all of the experts; the stream must miss and stay within
// its budget. Skips without libmlxc.
func TestExpertStreamingMLX(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	quant := t.TempDir()
	writeRandomMoE(t, quant, moeShape{Hidden: 64, Layers: 2, Experts: 8, TopK: 2, MoEInter: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 96, Bits: 4, Group: 32})
	dirs := map[string]string{"stacked-q4": quant}
	for _, fx := range moeFixtures {
		dirs[fx] = filepath.Join("testdata", fx)
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			prompt := []int32{5, 17, 3, 88, 41, 9, 60, 2, 33, 71}
			if name != "stacked-q4" {
				g := readGolden(t, filepath.Dir(dir))
				prompt = g.Prompt[:min(len(g.Prompt), 10)]
			}
			res, err := model.Load(dir, &model.LoadOptions{Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			defer res.Close()
			whole := prefillLogits(t, res, prompt, 0)
			chunked := prefillLogits(t, res, prompt, 3)
			greedy, err := modeltest.Greedy(res, prompt[:4], 6, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			probe, err := model.Load(dir, &model.LoadOptions{Backend: be, Experts: &model.ExpertStreaming{CacheBytes: math.MaxInt64}})
			if err != nil {
				t.Fatal(err)
			}
			st, _ := probe.(*model.Loaded).ExpertStats()
			probe.Close()
			for _, budget := range []int64{0, st.TotalBytes / 4, math.MaxInt64} {
				m, err := model.Load(dir, &model.LoadOptions{Backend: be, Experts: &model.ExpertStreaming{CacheBytes: budget, Workers: 2, Prefetch: budget > 0 && budget < math.MaxInt64}})
				if err != nil {
					t.Fatal(err)
				}
				sameBits(t, "whole prefill", prefillLogits(t, m, prompt, 0), whole)
				sameBits(t, "chunked prefill", prefillLogits(t, m, prompt, 3), chunked)
				got, err := modeltest.Greedy(m, prompt[:4], 6, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				equalIDs(t, "greedy", got, greedy)
				s, _ := m.(*model.Loaded).ExpertStats()
				if s.Misses == 0 || s.ResidentBytes > budget {
					t.Errorf("budget %d: %+v", budget, s)
				}
				t.Logf("budget %d of %d: hits %d misses %d read %d", budget, s.TotalBytes, s.Hits, s.Misses, s.BytesRead)
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPlanMLX: the plan's KV bytes equal what the MLX model's caches hold
// after a run on every MoE fixture, and a plan probed on MLX predicts a
// decode rate. Skips without libmlxc.
func TestPlanMLX(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	const ctx = 128
	for _, fx := range moeFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := filepath.Join("testdata", fx)
			p, err := model.PlanMemory(dir, model.PlanOptions{Context: ctx, Memory: 1 << 40, Stream: true, ExpertCacheBytes: 1 << 10, Predict: true, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			if p.PredictedDecodeTPS <= 0 || p.DecodeSeconds["weights"] <= 0 {
				t.Errorf("MLX prediction %v tok/s, terms %v", p.PredictedDecodeTPS, p.DecodeSeconds)
			}
			m, err := model.Load(dir, &model.LoadOptions{Backend: be, Experts: &model.ExpertStreaming{CacheBytes: 1 << 10}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := make([]int32, ctx)
			for i := range ids {
				ids[i] = int32(3 + (7*i)%(m.Info().Vocab-3))
			}
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			for _, part := range [][]int32{ids[:ctx-1], ids[ctx-1:]} {
				sc := tensor.NewScope()
				h, err := m.Forward(ids2D(part), caches, nil)
				if err != nil {
					sc.Close()
					t.Fatal(err)
				}
				tensor.Eval(h)
				sc.Close()
			}
			var held int64
			for _, c := range caches {
				if c != nil {
					held += int64(c.Bytes())
				}
			}
			if held != p.KVBytes {
				t.Errorf("plan kv_bytes %d at %d tokens, the MLX caches hold %d", p.KVBytes, ctx, held)
			}
		})
	}
}
