package cpu

import "unsafe"

// lrBT16 runs the chains of nx rows of t against nv ≤ 16 columns of a
// transposed B (Bᵀ [r, out] dense); see lowrank_amd64.s.
//
//go:noescape
func lrBT16(acc *float32, t *float32, ldt int, bt unsafe.Pointer, ldb int, r int, kind int, nx int, nv int)

const haveLRBT16 = true
