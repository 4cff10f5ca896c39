package cpu

// turboValues3Y decodes n 3-bit value codes through an 8-entry table with
// AVX2 (turbo_amd64.s): the same lookups as turboValueRow's portable loop.
//
//go:noescape
func turboValues3Y(dst *float32, src *byte, tab *float32, n int)

// turboKeys8Y dequantizes 8 keys of 8-bit codes into a Kᵀ panel with
// AVX2 (turbo_amd64.s), with the portable loop's arithmetic.
//
//go:noescape
func turboKeys8Y(pan *float32, k0 *byte, stride int, sm *float32, dk int)
