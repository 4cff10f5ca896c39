// Rounding float32 to bfloat16 in AVX-512 registers, shared by the
// kernels that store bfloat16 (simd_amd64.s, ew_amd64.s).

// BF16CONSTS loads BF16ROUND's constants into Z25-Z29 (clobbers BX).
#define BF16CONSTS \
	MOVL $0x7fff, BX \
	VPBROADCASTD BX, Z29 \
	MOVL $1, BX \
	VPBROADCASTD BX, Z28 \
	MOVL $0x7fffffff, BX \
	VPBROADCASTD BX, Z27 \
	MOVL $0x7f800000, BX \
	VPBROADCASTD BX, Z26 \
	MOVL $0x40, BX \
	VPBROADCASTD BX, Z25

// BF16ROUND rounds the 16 floats of Z0 to bfloat16 as tensor.F32ToBF16
// does (to nearest even: b + 0x7fff + lsb, then the top half; a NaN keeps
// its top half, made quiet with | 0x40) and stores them at (DI). It reads
// BF16CONSTS's registers and clobbers Z1-Z3 and K1.
#define BF16ROUND \
	VPSRLD    $16, Z0, Z1 \
	VPANDD    Z28, Z1, Z2 \
	VPADDD    Z29, Z2, Z2 \
	VPADDD    Z0, Z2, Z2 \
	VPSRLD    $16, Z2, Z2 \
	VPANDD    Z27, Z0, Z3 \
	VPCMPUD   $6, Z26, Z3, K1 \
	VPORD     Z25, Z1, K1, Z2 \
	VPMOVDW   Z2, (DI)
