//go:build !amd64

package cpu

import "unsafe"

func lrBT16(acc *float32, t *float32, ldt int, bt unsafe.Pointer, ldb int, r int, kind int, nx int, nv int) {
	panic("unreachable")
}

const haveLRBT16 = false
