//go:build !amd64

package cpu

func cvtF16ToF32N(dst *float32, src *uint16, n int) { panic("unreachable") }
