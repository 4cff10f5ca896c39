package cpu

// cvtF16ToF32N widens n float16 values (n a multiple of 16) exactly as
// tensor.F16ToF32 does, NaN payloads included; AVX-512 only (cvt16_amd64.s).
//
//go:noescape
func cvtF16ToF32N(dst *float32, src *uint16, n int)
