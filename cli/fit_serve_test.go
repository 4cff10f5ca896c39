package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestServeMemoryBudget: serve refuses a budget the demo model cannot
// fit, naming the term to shrink, and under one it fits exposes the plan
// at /fit and its admission numbers at /stats.
func TestServeMemoryBudget(t *testing.T) {
	code, _, errOut := run(t, "serve", "--backend", "cpu", "--memory-budget", "1MB")
	if code != 1 || !strings.Contains(errOut, "does not fit --memory-budget") || !strings.Contains(errOut, "shrink the") {
		t.Errorf("1MB budget: exit %d: %s", code, errOut)
	}
	if code, _, _ := run(t, "serve", "--memory-budget", "lots"); code != 2 {
		t.Errorf("--memory-budget lots: exit %d, want 2", code)
	}
	bin := buildMlxgo(t)
	cmd, url, _ := startMlxgo(t, bin, "--port", "0", "--backend", "cpu", "--memory-budget", "600MiB")
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}()
	waitHealthy(t, url)
	get := func(path string, v any) int {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode
	}
	var fit struct {
		Report struct {
			Memory     int64 `json:"memory_bytes"`
			MaxContext int   `json:"max_safe_context"`
			Weights    int64 `json:"weights_bytes"`
		} `json:"report"`
	}
	if code := get("/fit", &fit); code != 200 || fit.Report.Memory != 600<<20 || fit.Report.MaxContext <= 0 || fit.Report.Weights <= 0 {
		t.Errorf("/fit: %d %+v", code, fit)
	}
	var st struct {
		Admission *struct {
			MaxSafeContext int   `json:"max_safe_context"`
			Budget         int64 `json:"memory_budget_bytes"`
			Usable         int64 `json:"usable_bytes"`
		} `json:"admission"`
	}
	if code := get("/stats", &st); code != 200 || st.Admission == nil || st.Admission.MaxSafeContext != fit.Report.MaxContext || st.Admission.Usable <= 0 {
		t.Errorf("/stats admission: %d %+v", code, st.Admission)
	}
}
