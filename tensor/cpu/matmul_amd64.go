package cpu

import "unsafe"

// packT16 transposes nc chunks of a 16-row block for packB; see
// matmul_amd64.s. kind is 0 for float32, 1 for bfloat16, 2 for float16.
//
//go:noescape
func packT16(dst *float32, ldd int, src unsafe.Pointer, lds int, nc int, kind int)

// gemvT16 runs the FMA chains of a few x rows against 16 weight rows read
// straight from memory (no packing); see matmul_amd64.s.
//
//go:noescape
func gemvT16(acc *float32, x *float32, ldx int, rows *uintptr, kb int, kind int, nx int)
