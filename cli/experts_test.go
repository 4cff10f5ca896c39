package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
)

// TestGenerateExpertOffload: every MoE fixture generates the resident
// run's greedy ids with its experts streamed through a cache smaller than
// a quarter of them, and --json reports the counters, on the CPU backend
// and on MLX (skipped without libmlxc).
func TestGenerateExpertOffload(t *testing.T) {
	for _, be := range []string{"cpu", "mlx"} {
		t.Run(be, func(t *testing.T) {
			if be == "mlx" {
				mlxtest.OpenOrSkip(t)
			}
			expertOffload(t, be)
		})
	}
	if code, _, _ := run(t, "generate", "--prompt-ids", "1", "--expert-offload", "--expert-cache-policy", "mru"); code != 2 {
		t.Errorf("--expert-cache-policy mru: exit %d, want 2", code)
	}
}

// expertOffload runs TestGenerateExpertOffload's fixtures on backend.
func expertOffload(t *testing.T, backend string) {
	for _, fx := range []string{"qwen3_moe/f32", "gemma4_moe/f32", "generic_glm4_moe/f32", "deepseek_v3/f32", "glm_moe_dsa/f32", "qwen3_5_moe/f32", "qwen3_next/f32"} {
		dir := filepath.Join("..", "model", "testdata", fx)
		if _, err := os.Stat(dir); err != nil {
			t.Logf("%s: fixture absent", fx)
			continue
		}
		type result struct {
			IDs   []int32 `json:"ids"`
			Stats struct {
				Experts *struct {
					Hits          int64   `json:"hits"`
					Misses        int64   `json:"misses"`
					BytesRead     int64   `json:"bytes_read"`
					TotalBytes    int64   `json:"total_bytes"`
					BudgetBytes   int64   `json:"budget_bytes"`
					ResidentBytes int64   `json:"resident_bytes"`
					HitRate       float64 `json:"hit_rate"`
				} `json:"experts"`
			} `json:"stats"`
		}
		gen := func(extra ...string) result {
			args := append([]string{"generate", "--model", dir, "--prompt-ids", "5,9,14,3,27,8", "--max-tokens", "8", "--ignore-eos", "--backend", backend, "--json"}, extra...)
			code, out, errOut := run(t, args...)
			if code != 0 {
				t.Fatalf("%s %v: exit %d: %s", fx, extra, code, errOut)
			}
			var r result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%s: %v: %s", fx, err, out)
			}
			return r
		}
		res := gen()
		if res.Stats.Experts != nil {
			t.Errorf("%s: resident run reports experts", fx)
		}
		// a fifth of the experts (the default is a quarter)
		probe := gen("--expert-offload")
		if probe.Stats.Experts == nil || probe.Stats.Experts.BudgetBytes != probe.Stats.Experts.TotalBytes/4 {
			t.Fatalf("%s: default cache: %+v", fx, probe.Stats.Experts)
		}
		small := gen("--expert-cache-bytes", itoa(probe.Stats.Experts.TotalBytes/5))
		e := small.Stats.Experts
		if !slices.Equal(small.IDs, res.IDs) || !slices.Equal(probe.IDs, res.IDs) {
			t.Errorf("%s: streamed ids %v / %v, resident %v", fx, small.IDs, probe.IDs, res.IDs)
		}
		if e == nil || e.Misses == 0 || e.BytesRead == 0 || e.ResidentBytes > e.BudgetBytes {
			t.Errorf("%s: experts %+v", fx, e)
		}
		if pl := gen("--expert-cache-bytes", itoa(probe.Stats.Experts.TotalBytes/5), "--expert-cache-policy", "per-layer", "--expert-prefetch"); !slices.Equal(pl.IDs, res.IDs) {
			t.Errorf("%s: per-layer policy ids %v, resident %v", fx, pl.IDs, res.IDs)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
