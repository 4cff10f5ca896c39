//go:build !amd64

package cpu

// Without the amd64 assembly the quantized matmul takes the portable path.
var hasAVX2 = false

func sgemm8x32Y(kc int, a, b, c *float32, ldc int) { panic("unreachable") }
func cvtBF16ToF32Y(dst []float32, src []uint16)    { panic("unreachable") }
func cvtF16ToF32Y(dst []float32, src []uint16)     { panic("unreachable") }

func qmvA4(w *byte, ldw int, x *float32, ldx, ngc, cpg int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvA8(w *byte, ldw int, x *float32, ldx, ngc, cpg int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ4(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ8(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ4p(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ8p(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ8B(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}

func qmvZ8pB(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
	panic("unreachable")
}
