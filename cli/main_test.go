package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor/cpu"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runMain(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "mlxgo ") || !strings.Contains(out, "cpu") || !strings.Contains(out, " kernels=[") {
		t.Fatalf("version: code %d, output %q", code, out)
	}
	code, out, _ = run(t, "version", "--json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || len(v.Backends) == 0 {
		t.Fatalf("version --json: code %d, output %q", code, out)
	}
	// the CPU backend's kernels, as it dispatches them
	if want := cpu.KernelFeatures(); v.Kernels == nil || !slices.Equal(v.Kernels, want) {
		t.Fatalf("version --json: cpu_kernels %v, the backend uses %v", v.Kernels, want)
	}
}

func TestUnknownVerbAndBadFlag(t *testing.T) {
	if code, _, errOut := run(t, "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown verb") {
		t.Fatalf("unknown verb: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, "version", "--nope"); code != 2 || !strings.Contains(errOut, "unknown flag") {
		t.Fatalf("bad flag: code %d, stderr %q", code, errOut)
	}
	if code, _, _ := run(t, "version", "extra"); code != 2 {
		t.Fatalf("extra arg: code %d", code)
	}
}

func TestHelpListsVerbs(t *testing.T) {
	code, out, _ := run(t, "help")
	if code != 0 || !strings.Contains(out, "version") {
		t.Fatalf("help: code %d, output %q", code, out)
	}
	if code, out, _ := run(t, "--help"); code != 0 || !strings.Contains(out, "Verbs:") {
		t.Fatalf("--help: code %d, output %q", code, out)
	}
}
