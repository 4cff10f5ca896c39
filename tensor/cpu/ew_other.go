//go:build !amd64

package cpu

func ewBinBF16(op int, o, x, y *uint16, n int)          { panic("unreachable") }
func ewBinF32(op int, o, x, y *float32, n int)          { panic("unreachable") }
func ewSumSq8(acc *[8]float32, v *float32, n int)       { panic("unreachable") }
func ewScaleF32(o, x *float32, a float32, n int)        { panic("unreachable") }
func ropeHalves(row, cos, sin *float32, half, bf16 int) { panic("unreachable") }
func ewMaxAVX512(x *float32, n int) (float32, bool)     { panic("unreachable") }
