package cpu

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestKernelFeatures checks the reported features and CPU name against
// what Linux says of the CPU (/proc/cpuinfo), independently of the
// CPUID reads the kernels dispatch on: a feature is listed exactly when
// the kernel reports every flag its kernels need.
func TestKernelFeatures(t *testing.T) {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if runtime.GOARCH != "amd64" || err != nil {
		t.Skip("needs an amd64 Linux /proc/cpuinfo to compare with")
	}
	var flags []string
	model := ""
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k = strings.TrimSpace(k); {
		case !ok:
		case k == "flags" && flags == nil:
			flags = strings.Fields(v)
		case k == "model name" && model == "":
			model = strings.Join(strings.Fields(v), " ")
		}
	}
	has := func(fs ...string) bool {
		for _, f := range fs {
			if !slices.Contains(flags, f) {
				return false
			}
		}
		return true
	}
	avx2 := has("avx", "avx2", "fma", "f16c")
	avx512 := avx2 && has("avx512f", "avx512dq", "avx512bw", "avx512vl")
	got := KernelFeatures()
	for _, c := range []struct {
		name string
		want bool
	}{{"avx2", avx2}, {"avx512", avx512}, {"avx512_bf16", avx512 && has("avx512_bf16")}, {"avx512_vnni", avx512 && has("avx512_vnni")}} {
		if slices.Contains(got, c.name) != c.want {
			t.Errorf("%s listed %v; /proc/cpuinfo's flags say %v (kernels %v)", c.name, slices.Contains(got, c.name), c.want, got)
		}
	}
	if slices.Contains(got, "amx_int8") && !has("amx_tile", "amx_int8") {
		t.Errorf("amx_int8 listed without the CPU's amx_tile/amx_int8 flags")
	}
	if CPUModel() != model {
		t.Errorf("CPU %q, /proc/cpuinfo says %q", CPUModel(), model)
	}
	t.Logf("CPU %q, kernels %v, AMX: %q", CPUModel(), got, AMXStatus())
}
