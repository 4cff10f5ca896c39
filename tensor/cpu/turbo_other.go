//go:build !amd64

package cpu

func turboValues3Y(dst *float32, src *byte, tab *float32, n int) { panic("unreachable") }

func turboKeys8Y(pan *float32, k0 *byte, stride int, sm *float32, dk int) { panic("unreachable") }
