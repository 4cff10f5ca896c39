package main

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBench checks the mlx_lm.benchmark output shape on the Llama 3
// fixture, that the averages are the trials' means, that every trial
// generated exactly -g tokens, and the usage errors.
func TestBench(t *testing.T) {
	fx := "../model/testdata/llama3/f32"
	code, out, errs := run(t, "bench", "--model", fx, "-p", "20", "-g", "9", "-n", "3", "--backend", "cpu", "--prefill-step-size", "7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || lines[0] != "Running warmup.." || lines[1] != "Timing with prompt_tokens=20, generation_tokens=9, batch_size=1." {
		t.Fatalf("output %q", out)
	}
	trial := regexp.MustCompile(`^Trial (\d):  prompt_tps=([0-9.]+), generation_tps=([0-9.]+), peak_memory=([0-9.]+), total_time=([0-9.]+)$`)
	var sum [3]float64
	for i, l := range lines[2:5] {
		m := trial.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(i+1) {
			t.Fatalf("trial line %q", l)
		}
		for k := range 3 {
			v, _ := strconv.ParseFloat(m[k+2], 64)
			if v <= 0 {
				t.Errorf("trial %d: field %d is %v", i+1, k, v)
			}
			sum[k] += v
		}
	}
	avg := regexp.MustCompile(`^Averages: prompt_tps=([0-9.]+), generation_tps=([0-9.]+), peak_memory=([0-9.]+)$`).FindStringSubmatch(lines[5])
	if avg == nil {
		t.Fatalf("averages line %q", lines[5])
	}
	for k := range 3 {
		v, _ := strconv.ParseFloat(avg[k+1], 64)
		if math.Abs(v-sum[k]/3) > 0.002+1e-6*v {
			t.Errorf("average %d: %v, mean of trials %v", k, v, sum[k]/3)
		}
	}

	code, out, errs = run(t, "bench", fx, "-p", "5", "-g", "4", "-n", "2", "--backend", "cpu", "--json")
	var res struct {
		Trials []struct {
			Generated int     `json:"generation_tokens"`
			TPS       float64 `json:"generation_tps"`
		} `json:"trials"`
		Backend string `json:"backend"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Trials) != 2 || res.Backend != "cpu" {
		t.Fatalf("--json: exit %d, %q, %s", code, out, errs)
	}
	for _, tr := range res.Trials {
		if tr.Generated != 4 || tr.TPS <= 0 {
			t.Errorf("trial %+v: want 4 tokens (EOS ignored)", tr)
		}
	}
	for _, args := range [][]string{{fx, "-g", "0"}, {fx, "-n", "0"}, {fx, "-p", "-3"}, {fx, "x"}} {
		if code, _, _ := run(t, append([]string{"bench"}, args...)...); code != 2 {
			t.Errorf("bench %q: exit %d, want 2", args, code)
		}
	}
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("MLXGO_MODELS", t.TempDir())
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	if code, out, errs := run(t, "bench", "-p", "8", "-g", "4", "-n", "1", "--backend", "cpu"); code != 0 ||
		!strings.Contains(errs, "demo model") || !strings.Contains(out, "Averages: ") {
		t.Errorf("bench on the default (demo) model: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := run(t, "bench", "no-such-model-anywhere", "--backend", "cpu"); code != 1 || !strings.Contains(errs, "no such folder, and nothing in the HF cache") {
		t.Errorf("unknown model: exit %d, %s", code, errs)
	}
}
