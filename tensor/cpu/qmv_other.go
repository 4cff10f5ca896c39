//go:build !amd64

package cpu

// Without the amd64 assembly the quantized matvec takes the portable path.
var hasBF16 = false

func qmv4bf16(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int) {
	panic("unreachable")
}

func qmv4bf16x(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int) {
	panic("unreachable")
}

func qmvDeinterleave(dst, src *uint16, nb int, idx *uint16) { panic("unreachable") }
func qmvGroupSums(dst, x *float32, ng, vpg int)             { panic("unreachable") }
