package cpu

// q8Kernels reports the int8 kernels' instructions (AVX512_VNNI with
// AVX512BW, which hasAVX512 includes).
var q8Kernels = hasVNNI

// The int8 kernels (q8_amd64.s, gen_q8.go): q8k{bits}r{R} computes, for
// one 16-row block of a q8pack at w and R quantized x rows at x (ldx
// bytes apart, q8RowBytes each), the 16 outputs of each row, written at
// out + r·ldo bytes; ng groups of cpg = gs/8 chunks.

//go:noescape
func q8k4r1(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r2(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r3(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r4(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r5(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r6(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r7(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r8(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r1(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r2(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r3(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r4(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r5(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r6(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r7(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r8(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r1h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r2h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r3h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r4h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r5h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r6h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r7h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k4r8h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r1h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r2h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r3h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r4h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r5h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r6h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r7h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

//go:noescape
func q8k8r8h(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int)

// q8kern are the kernels by [half][bits == 8][r-1].
var q8kern = [2][2][8]func(w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int){
	{
		{q8k4r1, q8k4r2, q8k4r3, q8k4r4, q8k4r5, q8k4r6, q8k4r7, q8k4r8},
		{q8k8r1, q8k8r2, q8k8r3, q8k8r4, q8k8r5, q8k8r6, q8k8r7, q8k8r8},
	},
	{
		{q8k4r1h, q8k4r2h, q8k4r3h, q8k4r4h, q8k4r5h, q8k4r6h, q8k4r7h, q8k4r8h},
		{q8k8r1h, q8k8r2h, q8k8r3h, q8k8r4h, q8k8r5h, q8k8r6h, q8k8r7h, q8k8r8h},
	},
}

// q8Kernel runs the kernel for bits and r (1..8) x rows over a pack whose
// scales and biases are bfloat16 when half, float32 otherwise.
func q8Kernel(bits, r int, half bool, w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int) {
	h, e := 0, 0
	if half {
		h = 1
	}
	if bits == 8 {
		e = 1
	}
	q8kern[h][e][r-1](w, x, ldx, ng, cpg, out, ldo)
}

// q8QuantAVX512 is q8QuantizeRef for ng groups of gs floats (q8quant_amd64.s).
//
//go:noescape
func q8QuantAVX512(dst *byte, x *float32, ng, gs int)

func init() {
	if q8Kernels {
		q8Quantize = func(dst []byte, x []float32, gs int) {
			_ = dst[len(x)/gs*(gs+8)-1]
			q8QuantAVX512(&dst[0], &x[0], len(x)/gs, gs)
		}
	}
}
