//go:build !amd64

package cpu

// Without the amd64 assembly the quantized matvec takes the portable path.
var hasBF16 = false

func qmvRowsX(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int) {
	panic("unreachable")
}

func qmvRowsXL(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int) {
	panic("unreachable")
}

func qmvDeinterleave(dst, src *uint16, nb int, idx *uint16) { panic("unreachable") }
func qmvGroupSums(dst, x *float32, ng, vpg int)             { panic("unreachable") }

func qmvRows2X(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int) {
	panic("unreachable")
}

func qmvRows2XL(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int) {
	panic("unreachable")
}

func qmvRowsXB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int) {
	panic("unreachable")
}

func qmvRowsXLB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int) {
	panic("unreachable")
}

func qmvRows2XB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int) {
	panic("unreachable")
}

func qmvRows2XLB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int) {
	panic("unreachable")
}
