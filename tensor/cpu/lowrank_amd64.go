package cpu

import "unsafe"

// lrBT16 runs the chains of nx rows of t against nv ≤ 16 columns of a
// transposed B (Bᵀ [r, out] dense); see lowrank_amd64.s.
//
//go:noescape
func lrBT16(acc *float32, t *float32, ldt int, bt unsafe.Pointer, ldb int, r int, kind int, nx int, nv int)

// lrBT4 runs four interleaved lrBT16 chains (four column groups of one
// Bᵀ, or four blocks of one product), prefetching pf bytes ahead of
// each chain's B rows; see lowrank_amd64.s.
//
//go:noescape
func lrBT4(acc *float32, accstep int, t *float32, ldt int, tstep int, bt unsafe.Pointer, ldb int, bstep int, r int, kind int, nx int, nv int, pf int)

const haveLRBT16 = true
