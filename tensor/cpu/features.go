package cpu

// KernelFeatures lists the instruction-set features this backend's
// kernels dispatch on in this process, in a fixed order: avx2, avx512
// (F/BW/DQ/VL), avx512_bf16, avx512_vnni, amx_int8 (the last only while
// the AMX path is on; AMXStatus says why not). Empty (not nil) where only
// the portable Go loops run.
func KernelFeatures() []string {
	f := []string{}
	for _, c := range []struct {
		on   bool
		name string
	}{{hasAVX2, "avx2"}, {hasAVX512, "avx512"}, {hasBF16, "avx512_bf16"}, {q8Kernels, "avx512_vnni"}, {AMXInt8(), "amx_int8"}} {
		if c.on {
			f = append(f, c.name)
		}
	}
	return f
}

// CPUModel is the processor's name as it reports it (the CPUID brand
// string on amd64), "" where unknown.
func CPUModel() string { return cpuModel }
