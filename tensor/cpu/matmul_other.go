//go:build !amd64

package cpu

import "unsafe"

// Without the amd64 assembly packB takes its portable path.
func packT16(dst *float32, ldd int, src unsafe.Pointer, lds int, nc int, kind int) {
	panic("unreachable")
}

func gemvT16(acc *float32, x *float32, ldx int, rows *uintptr, kb int, kind int, nx int) {
	panic("unreachable")
}
