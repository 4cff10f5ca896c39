package cpu

import "unsafe"

// ewExpConsts is what the exp kernels (exp_amd64.s) read: the table and
// the constants of ewExpInto's loop, rounded exactly as the Go code rounds
// them, so the vector lanes repeat the scalar arithmetic bit for bit.
type ewExpConsts struct {
	tab                           [32]float64 // ewExpTable
	k, shift, l, sixth, half, one float64     // 32/ln2, ewShifter, ln2/32, 1/6, 0.5, 1
	hi, lo                        float32     // the fast range: lo ≤ v < hi
}

// ewExpK is the one ewExpConsts the kernels use.
var ewExpK = ewExpConsts{
	tab:   ewExpTable,
	k:     32 / ewLn2,
	shift: ewShifter,
	l:     ewLn2 / 32,
	sixth: 1.0 / 6,
	half:  0.5,
	one:   1,
	hi:    88.8,
	lo:    -104,
}

// the assembly reads ewExpConsts at these offsets
var _ = [1]struct{}{}[unsafe.Offsetof(ewExpK.k)-256]
var _ = [1]struct{}{}[unsafe.Offsetof(ewExpK.hi)-304]

// ewExpVector selects the AVX-512 kernels in ewExpInto and ewSigmoidInto
// (tests and benchmarks switch it off to run the scalar loops).
var ewExpVector = hasAVX512

// ewExpSumAVX512 is ewExpInto's loop over n elements (o and x the same
// memory or disjoint): o[i] = e^(x[i]-c) and the float64 sums s0 (fast
// range) and s1 (the rest) added in element order, returning s0+s1.
//
//go:noescape
func ewExpSumAVX512(o, x *float32, n int, c float32, k *ewExpConsts) float64

// ewExpAVX512 writes what ewExpSumAVX512 writes, without the sums.
//
//go:noescape
func ewExpAVX512(o, x *float32, n int, c float32, k *ewExpConsts)

// ewSigmoidAVX512 is ewSigmoidInto over n elements (o and x the same
// memory or disjoint).
//
//go:noescape
func ewSigmoidAVX512(o, x *float32, n int, k *ewExpConsts)
