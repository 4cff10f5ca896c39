package model_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// TestDecodeKernels holds the plan's kernels to the headers: on a dense
// fixture every 2-D weight but the embedding is one call, and the bytes
// they read are the checkpoint's less the embedding and the norms; on
// MoE fixtures the routed experts read top-k of each bank.
func TestDecodeKernels(t *testing.T) {
	for _, name := range []string{"llama3", "qwen3_moe", "gemma4_moe"} {
		dir := filepath.Join("testdata", name, "f32")
		if _, err := os.Stat(dir); err != nil {
			t.Skipf("fixture %s absent", name)
		}
		t.Run(name, func(t *testing.T) {
			p, err := model.PlanMemory(dir, model.PlanOptions{Context: 64, Memory: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Kernels) == 0 {
				t.Fatal("no kernels")
			}
			set, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			var dense, expert float64
			for _, k := range p.Kernels {
				if k.Calls <= 0 || k.Bytes <= 0 || k.Out <= 0 || k.In <= 0 || k.Key() == "" {
					t.Errorf("kernel %+v", k)
				}
				if k.Routed {
					expert += k.Calls * float64(k.Bytes)
				} else {
					dense += k.Calls * float64(k.Bytes)
				}
			}
			var want int64
			for _, n := range set.Names() {
				info, _ := set.Info(n)
				if len(info.Shape) == 2 && !strings.Contains(n, ".experts.") && !strings.Contains(n, "embed_tokens") && !strings.Contains(n, "per_layer") {
					want += info.Size()
				}
			}
			tied := true
			for _, n := range set.Names() {
				if strings.HasPrefix(n, "lm_head") {
					tied = false
				}
			}
			if tied {
				info, _ := set.Info("model.embed_tokens.weight")
				if info.Size() == 0 {
					info, _ = set.Info("model.language_model.embed_tokens.weight")
				}
				want += info.Size()
			}
			if int64(dense) != want {
				t.Errorf("dense kernels read %.0f bytes, the 2-D weights (head included) hold %d", dense, want)
			}
			if p.ExpertBytes > 0 && (expert <= 0 || int64(math.Round(expert)) != p.ActiveExpertBytesPerToken) {
				t.Errorf("expert kernels read %.0f bytes per token, the plan's routes %d", expert, p.ActiveExpertBytesPerToken)
			}
			if p.ExpertBytes == 0 && expert != 0 {
				t.Errorf("dense model with %.0f expert bytes", expert)
			}
		})
	}
}

// TestPlanPredict: a probed plan predicts a positive rate whose terms sum
// to the step, times every kernel, and a second probe reads the cache.
func TestPlanPredict(t *testing.T) {
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	dir := filepath.Join("testdata", "qwen3_moe", "f32")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("qwen3_moe fixture absent")
	}
	be, err := tensor.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.PlanMemory(dir, model.PlanOptions{Context: 64, Memory: 1 << 40, Predict: true, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	var step float64
	for _, v := range p.DecodeSeconds {
		step += v
	}
	if p.PredictedDecodeTPS <= 0 || math.Abs(1/step-p.PredictedDecodeTPS) > 1e-9*p.PredictedDecodeTPS {
		t.Errorf("predicted %v tok/s, terms %v", p.PredictedDecodeTPS, p.DecodeSeconds)
	}
	for _, k := range []string{"weights", "experts", "routing", "ops", "kv"} {
		if p.DecodeSeconds[k] <= 0 {
			t.Errorf("term %s: %v", k, p.DecodeSeconds[k])
		}
	}
	probe, err := model.ProbeDecode(be, p.Kernels, 1<<20, 64, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Kernels {
		if probe.Seconds[k.Key()] <= 0 {
			t.Errorf("kernel %s not timed", k.Key())
		}
	}
	again, err := model.ProbeDecode(be, p.Kernels, 1<<20, 64, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range probe.Seconds {
		if again.Seconds[k] != v {
			t.Errorf("second probe of %s: %v, first %v (not cached)", k, again.Seconds[k], v)
		}
	}
	b2, err := model.PlanMemory(dir, model.PlanOptions{Context: 64, Batch: 4, Memory: 1 << 40, Predict: true, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if b2.PredictedDecodeTPS <= p.PredictedDecodeTPS {
		t.Errorf("batch 4 predicts %v tok/s, batch 1 %v", b2.PredictedDecodeTPS, p.PredictedDecodeTPS)
	}
}
