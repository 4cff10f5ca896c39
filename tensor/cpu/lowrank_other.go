//go:build !amd64

package cpu

import "unsafe"

func lrBT16(acc *float32, t *float32, ldt int, bt unsafe.Pointer, ldb int, r int, kind int, nx int, nv int) {
	panic("unreachable")
}

func lrBT4(acc *float32, accstep int, t *float32, ldt int, tstep int, bt unsafe.Pointer, ldb int, bstep int, r int, kind int, nx int, nv int, pf int) {
	panic("unreachable")
}

const haveLRBT16 = false
