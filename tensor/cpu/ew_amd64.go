package cpu

// ewBinBF16 sets o = x op y for n bfloat16 values (n a multiple of 16;
// op ewOpAdd, ewOpSub or ewOpMul), each computed in float32 and rounded
// as tensor.F32ToBF16 (ew_amd64.s); AVX-512 only.
//
//go:noescape
func ewBinBF16(op int, o, x, y *uint16, n int)

// ewBinF32 sets o = x op y for n float32 values (n a multiple of 16; op
// ewOpAdd, ewOpSub, ewOpMul or ewOpDiv), IEEE single precision as Go's
// float32 arithmetic; AVX-512 only.
//
//go:noescape
func ewBinF32(op int, o, x, y *float32, n int)

// ewSumSq8 adds v[i+l]² (each square rounded to float32) into acc[l] for
// i = 0, 8, … < n (n a multiple of 8): normSumSq's lanes; AVX-512 build.
//
//go:noescape
func ewSumSq8(acc *[8]float32, v *float32, n int)

// ewScaleF32 sets o = x·a for n float32 values (n a multiple of 16).
//
//go:noescape
func ewScaleF32(o, x *float32, a float32, n int)

// ropeHalves rotates the pairs (row[i], row[i+half]) for i < half (a
// multiple of 16) by cos[i], sin[i] as RoPE's loops do, each product
// rounded to bfloat16 when bf16 is 1 (float32 when 0).
//
//go:noescape
func ropeHalves(row, cos, sin *float32, half, bf16 int)

// ewMaxAVX512 is the largest of the n float32 at x (n a positive multiple
// of 16) and whether none was NaN; AVX-512 only (see ewMaxF32).
//
//go:noescape
func ewMaxAVX512(x *float32, n int) (m float32, clean bool)
