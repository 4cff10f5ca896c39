package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi"
)

// TestPickBackend: auto picks MLX only when MLX has a GPU device; explicit
// names are taken as given without asking.
func TestPickBackend(t *testing.T) {
	gpu := func() (bool, error) { return true, nil }
	cpuOnly := func() (bool, error) { return false, nil }
	noLib := func() (bool, error) { return false, fmt.Errorf("load: %w", mlxffi.ErrNotFound) }
	broken := func() (bool, error) { return false, errors.New("library lacks 3 bound functions") }
	cases := []struct {
		name   string
		probe  func() (bool, error)
		want   string
		asked  bool   // the probe must be called (or must not)
		reason string // substring of why
	}{
		{"auto", gpu, "mlx", true, "GPU device"},
		{"auto", cpuOnly, "cpu", true, "no GPU device"},
		{"auto", noLib, "cpu", true, "libmlxc not found"},
		{"auto", broken, "cpu", true, "lacks 3 bound functions"},
		{"mlx", cpuOnly, "mlx", false, ""},
		{"mlx", noLib, "mlx", false, ""},
		{"cpu", gpu, "cpu", false, ""},
	}
	for _, c := range cases {
		asked := false
		probe := func() (bool, error) { asked = true; return c.probe() }
		pick, why, err := pickBackend(c.name, probe)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if pick != c.want || asked != c.asked || !strings.Contains(why, c.reason) || (c.reason == "") != (why == "") {
			t.Errorf("%s: picked %q (why %q, probe asked %v); want %q (why ~%q, asked %v)", c.name, pick, why, asked, c.want, c.reason, c.asked)
		}
	}
	if _, _, err := pickBackend("tpu", gpu); !errors.Is(err, errUsage) {
		t.Errorf("--backend tpu: %v, want a usage error", err)
	}
}

// TestGenerateJSONNamesBackend: generate --json reports the backend that
// ran in stats.backend, and auto says on stderr which one it picked.
func TestGenerateJSONNamesBackend(t *testing.T) {
	gen := func(backend string) (string, string) {
		t.Helper()
		code, out, errs := run(t, "generate", "--model", "../model/testdata/llama3/f32", "--prompt-ids", "1,2",
			"--max-tokens", "2", "--ignore-eos", "--json", "--backend", backend)
		if code != 0 {
			t.Fatalf("--backend %s: exit %d: %s", backend, code, errs)
		}
		var r struct {
			Stats map[string]any `json:"stats"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		if r.Stats["generated_tokens"] != 2.0 {
			t.Errorf("--backend %s: stats %v", backend, r.Stats)
		}
		got, _ := r.Stats["backend"].(string)
		return got, errs
	}
	if got, _ := gen("cpu"); got != "cpu" {
		t.Errorf("--backend cpu: stats.backend %q", got)
	}
	want, _, _ := pickBackend("auto", mlxffi.HasGPU)
	got, errs := gen("auto")
	if got != want {
		t.Errorf("--backend auto: stats.backend %q, want %q", got, want)
	}
	if say := "using the " + strings.ToUpper(want) + " backend"; !strings.Contains(errs, say) {
		t.Errorf("--backend auto: stderr %q does not say %q", errs, say)
	}
	if _, err := mlxffi.Open(); errors.Is(err, mlxffi.ErrNotFound) {
		t.Log("libmlxc not found: --backend mlx not checked")
		return
	}
	if got, _ := gen("mlx"); got != "mlx" {
		t.Errorf("--backend mlx: stats.backend %q", got)
	}
}
