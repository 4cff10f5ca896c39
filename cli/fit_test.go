package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// fitFixture is a MoE fixture of the model module's tests.
var fitFixture = filepath.Join("..", "model", "testdata", "qwen3_moe", "f32")

func TestFitJSON(t *testing.T) {
	if _, err := os.Stat(fitFixture); err != nil {
		t.Skip("model/testdata/qwen3_moe fixture absent")
	}
	code, out, errOut := run(t, "fit", fitFixture, "--context", "100", "--batch", "3", "--memory", "1GiB", "--bandwidth", "10", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Weights    int64   `json:"weights_bytes"`
		Experts    int64   `json:"expert_bytes"`
		KVPerToken int64   `json:"kv_bytes_per_token"`
		KV         int64   `json:"kv_bytes"`
		Total      int64   `json:"total_bytes"`
		Memory     int64   `json:"memory_bytes"`
		Fits       bool    `json:"fits"`
		MaxContext int     `json:"max_safe_context"`
		TPS        float64 `json:"predicted_decode_tps"`
		Batch      int     `json:"batch"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	set, err := safetensors.OpenDir(fitFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var data int64
	for _, f := range set.Files() {
		fi, _ := os.Stat(f.Path())
		data += fi.Size() - f.DataOffset()
	}
	// 3 layers of 2 KV heads × 16 dims, keys and values in float32
	if p.Weights != data || p.Experts == 0 || p.KVPerToken != 3*2*2*16*4 || p.KV != 3*256*p.KVPerToken {
		t.Errorf("plan %+v; the files hold %d data bytes", p, data)
	}
	if p.Memory != 1<<30 || !p.Fits || p.MaxContext == 0 || p.TPS <= 0 || p.Batch != 3 || p.Total <= p.Weights+p.KV {
		t.Errorf("plan %+v", p)
	}

	code, out, _ = run(t, "fit", "--model", fitFixture, "--memory", "1MB", "--no-prediction")
	if code != 0 || !strings.Contains(out, "fits: no") || !strings.Contains(out, "kv full") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
	code, out, _ = run(t, "fit", fitFixture, "--expert-offload", "--expert-cache-bytes", "10KiB", "--json", "--no-prediction")
	var s struct {
		Streamed bool  `json:"experts_streamed"`
		Resident int64 `json:"resident_weights_bytes"`
		Weights  int64 `json:"weights_bytes"`
		Experts  int64 `json:"expert_bytes"`
		Cache    int64 `json:"expert_cache_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil || !s.Streamed || s.Resident != s.Weights-s.Experts || s.Cache < 10<<10 {
		t.Errorf("exit %d, streamed plan %+v (%s)", code, s, out)
	}
	if code, _, _ := run(t, "fit", fitFixture, "--memory", "lots"); code != 2 {
		t.Errorf("--memory lots: exit %d, want 2", code)
	}
}

// TestFitProbe: fit's default prediction probes the checkpoint's kernels
// on the CPU backend and on MLX (skipped without libmlxc), reporting each
// term of the predicted step.
func TestFitProbe(t *testing.T) {
	if _, err := os.Stat(fitFixture); err != nil {
		t.Skip("model/testdata/qwen3_moe fixture absent")
	}
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	for _, be := range []string{"cpu", "mlx"} {
		t.Run(be, func(t *testing.T) {
			if be == "mlx" {
				mlxtest.OpenOrSkip(t)
			}
			code, out, errOut := run(t, "fit", fitFixture, "--context", "64", "--backend", be, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var p struct {
				TPS     float64            `json:"predicted_decode_tps"`
				Terms   map[string]float64 `json:"predicted_step_seconds"`
				Kernels []struct {
					Key   string  `json:"key"`
					Calls float64 `json:"calls"`
				} `json:"decode_kernels"`
			}
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if p.TPS <= 0 || p.Terms["weights"] <= 0 || p.Terms["experts"] <= 0 || len(p.Kernels) == 0 || p.Kernels[0].Key == "" {
				t.Errorf("plan %+v", p)
			}
			code, out, _ = run(t, "fit", fitFixture, "--backend", be)
			if code != 0 || !strings.Contains(out, "probed step: ") {
				t.Errorf("exit %d, table:\n%s", code, out)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "4GiB": 4 << 30, "4G": 4 << 30, "2GB": 2e9, "1.5MiB": 3 << 19, "1e9": 1e9, "512 KB": 512e3} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "3 parsecs", "1e30"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) succeeded", in)
		}
	}
}
