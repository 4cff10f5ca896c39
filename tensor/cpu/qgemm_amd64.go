package cpu

// qgemmKern is the prefill microkernel: a 6×32 output tile over a run of
// groups from a bfloat16 code panel, added to the tile when acc ≠ 0; see
// qgemm_amd64.s.
//
//go:noescape
func qgemmKern(p *uint32, x *uint16, ldx, xlo int, sb, xs *float32, ldxs, ng, gkp int, out *float32, ldo, acc int)

// qgemmUnpack writes 16 rows of 4- or 8-bit codes as half of a panel of
// bfloat16 code pairs; see qgemm_amd64.s.
//
//go:noescape
func qgemmUnpack(dst *uint32, w *byte, nd int, idx *int32, mask, bits int)

// cvtF32ToBF16 rounds n floats (a multiple of 16) as tensor.F32ToBF16
// does; see qgemm_amd64.s.
//
//go:noescape
func cvtF32ToBF16(dst *uint16, src *float32, n int)
