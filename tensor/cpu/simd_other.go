//go:build !amd64

package cpu

// Without the amd64 assembly every kernel takes its portable path.
var hasAVX512 = false

func cvtBF16ToF32(dst []float32, src []uint16)                            { panic("unreachable") }
func cvtF16ToF32(dst []float32, src []uint16)                             { panic("unreachable") }
func qdot4(w *byte, x *float32, s, b, iota *float32, ng, cpg int) float32 { panic("unreachable") }
func qgemm4x8(w *byte, x *float32, s, b *float32, ng, cpg int, out *float32, ldo int) {
	panic("unreachable")
}
func sgemm8x32(kc int, a, b, c *float32, ldc int)                    { panic("unreachable") }
func sgemm8x32B(kc int, a, b *float32, ldb int, c *float32, ldc int) { panic("unreachable") }
func sgemm4x32B(kc int, a, b *float32, ldb int, c *float32, ldc int) { panic("unreachable") }
func sgemm8x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int) {
	panic("unreachable")
}
func sgemm4x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int) {
	panic("unreachable")
}

func qdot4x4(w *byte, bpr int, x *float32, s, b *float32, iota *float32, ng, cpg int, out *float32) {
	panic("unreachable")
}

func cvtF32ToBF16(dst *uint16, src *float32, n int) { panic("unreachable") }
func cvtF32ToF16(dst *uint16, src *float32, n int)  { panic("unreachable") }

// prefetchL2 is a no-op without the amd64 assembly.
func prefetchL2(p *byte, n int) {}
