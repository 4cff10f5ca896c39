package cpu

import "github.com/mlxgo/mlxgo/tensor"

// AsType converts a to dt with C semantics: float to integer truncates
// toward zero (NaN gives 0; negative values wrap into unsigned types),
// integers wrap, anything to bool is x != 0, and narrowing to a 16-bit
// float rounds to nearest even. The same dtype gives a view sharing a's
// storage, so the no-op cast costs nothing.
func (be *Backend) AsType(a *tensor.Array, dt tensor.DType) *tensor.Array {
	src := get(a)
	if a.DType() == dt {
		return be.view(src, src.off, a.Shape(), src.strides, dt)
	}
	out, om := be.newArray(a.Shape(), dt)
	if a.Size() == 0 {
		return out
	}
	sdt := a.DType()
	l := ewCollapse(a.Shape(), rowMajor(a.Shape()), src.strides)
	st := l.inner(1)
	sd, od := src.buf.data, om.buf.data
	ewEach(l, []int{0, src.off}, ewGrain, func() func([]int, int) {
		fb := make([]float32, ewBlock)
		ib := make([]int64, ewBlock)
		return func(pos []int, n int) {
			for d := 0; d < n; d += ewBlock {
				m := min(ewBlock, n-d)
				so, oo := pos[1]+d*st, pos[0]+d
				if sdt.IsFloat() {
					// float32 holds every float16/bfloat16 value exactly, so one rounding happens at most
					ewStoreF32(dt, od, oo, 1, ewLoadF32(sdt, sd, so, st, m, fb))
					continue
				}
				x := ewLoadI64(sdt, sd, so, st, m, ib)
				if dt.IsFloat() {
					f := fb[:m]
					for i, v := range x {
						f[i] = float32(v) // correctly rounded, also for int64
					}
					ewStoreF32(dt, od, oo, 1, f)
				} else {
					ewStoreI64(dt, od, oo, 1, x)
				}
			}
		}
	})
	return out
}

// storeF16 rounds src into u (float16, as tensor.F32ToF16), 16 at a time
// with AVX-512.
func storeF16(u []uint16, src []float32) {
	u = u[:len(src)]
	i := 0
	if hasAVX512 && len(src) >= 16 {
		i = len(src) &^ 15
		cvtF32ToF16(&u[0], &src[0], i)
	}
	for ; i < len(src); i++ {
		u[i] = tensor.F32ToF16(src[i])
	}
}

// storeBF16 rounds src into u (bfloat16, as tensor.F32ToBF16), 16 at a
// time with AVX-512: a prefill product's outputs are millions of values.
func storeBF16(u []uint16, src []float32) {
	u = u[:len(src)]
	i := 0
	if hasAVX512 && len(src) >= 16 {
		i = len(src) &^ 15
		cvtF32ToBF16(&u[0], &src[0], i)
	}
	for ; i < len(src); i++ {
		u[i] = tensor.F32ToBF16(src[i])
	}
}

// loadF16 widens src (float16) into dst bit for bit as tensor.F16ToF32:
// 16 at a time with AVX-512, 8 at a time with AVX2 F16C (whose signalling
// NaNs come back quiet, so NaN lanes are redone by tensor.F16ToF32).
func loadF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	i := 0
	switch {
	case hasAVX512 && len(src) >= 16:
		i = len(src) &^ 15
		cvtF16ToF32N(&dst[0], &src[0], i)
	case hasAVX2 && len(src) >= 8:
		i = len(src) &^ 7
		cvtF16ToF32Y(dst[:i], src[:i])
		for k, h := range src[:i] {
			if h&0x7fff > 0x7c00 {
				dst[k] = tensor.F16ToF32(h)
			}
		}
	}
	for ; i < len(src); i++ {
		dst[i] = tensor.F16ToF32(src[i])
	}
}
