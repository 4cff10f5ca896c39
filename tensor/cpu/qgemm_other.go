//go:build !amd64

package cpu

// Without the amd64 assembly qgemmUsable is false and these never run.

func qgemmKern(p *uint32, x *uint16, ldx, xlo int, sb, xs *float32, ldxs, ng, gkp int, out *float32, ldo, acc int) {
	panic("unreachable")
}

func qgemmUnpack(dst *uint32, w *byte, nd int, idx *int32, mask, bits int) { panic("unreachable") }

func cvtF32ToBF16(dst *uint16, src *float32, n int) { panic("unreachable") }
