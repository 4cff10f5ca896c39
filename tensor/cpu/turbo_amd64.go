package cpu

// turboValues3Y decodes n 3-bit value codes through an 8-entry table with
// AVX2 (turbo_amd64.s): the same lookups as turboValueRow's portable loop.
//
//go:noescape
func turboValues3Y(dst *float32, src *byte, tab *float32, n int)
