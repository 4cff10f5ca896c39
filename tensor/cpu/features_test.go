package cpu

import (
	"runtime"
	"slices"
	"testing"
)

// TestKernelFeatures checks the reported features against the switches
// the kernels dispatch on, and that an amd64 CPU names itself.
func TestKernelFeatures(t *testing.T) {
	f := KernelFeatures()
	for _, c := range []struct {
		on   bool
		name string
	}{{hasAVX2, "avx2"}, {hasAVX512, "avx512"}, {hasBF16, "avx512_bf16"}, {q8Kernels, "avx512_vnni"}, {AMXInt8(), "amx_int8"}} {
		if slices.Contains(f, c.name) != c.on {
			t.Errorf("%s listed %v, dispatched on %v (list %v)", c.name, slices.Contains(f, c.name), c.on, f)
		}
	}
	if runtime.GOARCH == "amd64" && CPUModel() == "" {
		t.Error("no CPU brand string on amd64")
	}
	t.Logf("CPU %q, kernels %v, AMX: %q", CPUModel(), f, AMXStatus())
}
