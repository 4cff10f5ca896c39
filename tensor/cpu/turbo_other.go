//go:build !amd64

package cpu

func turboValues3Y(dst *float32, src *byte, tab *float32, n int) { panic("unreachable") }
