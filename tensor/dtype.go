package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is an element type. The set is the one MLX checkpoints and the
// forward passes need; names follow safetensors' spelling in lower case.
type DType uint8

// The supported element types.
const (
	Invalid DType = iota
	Bool
	Uint8
	Int32
	Uint32
	Int64
	Float16
	BFloat16
	Float32
)

var dtypeNames = [...]string{
	Invalid:  "invalid",
	Bool:     "bool",
	Uint8:    "uint8",
	Int32:    "int32",
	Uint32:   "uint32",
	Int64:    "int64",
	Float16:  "float16",
	BFloat16: "bfloat16",
	Float32:  "float32",
}

var dtypeSizes = [...]int{Bool: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Float16: 2, BFloat16: 2, Float32: 4}

// String returns the dtype's lower-case name ("bfloat16").
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes one element occupies.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the supported dtypes.
func (d DType) Valid() bool { return d > Invalid && d <= Float32 }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float16 || d == BFloat16 || d == Float32 }

// IsInteger reports whether d is an integer type (bool excluded).
func (d DType) IsInteger() bool { return d == Uint8 || d == Int32 || d == Uint32 || d == Int64 }

// IsSigned reports whether d can hold negative values.
func (d DType) IsSigned() bool { return d.IsFloat() || d == Int32 || d == Int64 }

// ParseDType maps a name to a DType. It accepts the lower-case names
// returned by String and safetensors' upper-case codes (F32, BF16, I64, ...).
func ParseDType(s string) (DType, error) {
	switch s {
	case "bool", "BOOL":
		return Bool, nil
	case "uint8", "U8":
		return Uint8, nil
	case "int32", "I32":
		return Int32, nil
	case "uint32", "U32":
		return Uint32, nil
	case "int64", "I64":
		return Int64, nil
	case "float16", "F16":
		return Float16, nil
	case "bfloat16", "BF16":
		return BFloat16, nil
	case "float32", "F32":
		return Float32, nil
	}
	return Invalid, fmt.Errorf("unsupported dtype %q (supported: bool, uint8, int32, uint32, int64, float16, bfloat16, float32)", s)
}

// rank orders dtypes for promotion: bool < uint8 < uint32 < int32 < int64 < f16 < bf16 < f32,
// with f16 and bf16 promoting to f32 together.
func promoteRank(d DType) int {
	switch d {
	case Bool:
		return 0
	case Uint8:
		return 1
	case Uint32:
		return 2
	case Int32:
		return 3
	case Int64:
		return 4
	case Float16:
		return 5
	case BFloat16:
		return 6
	case Float32:
		return 7
	}
	return -1
}

// PromoteTypes returns the dtype two operands are computed in, following
// MLX: floats win over integers; float16 with bfloat16 gives float32;
// uint32 with int32 gives int64.
func PromoteTypes(a, b DType) DType {
	if a == b {
		return a
	}
	if (a == Float16 && b == BFloat16) || (a == BFloat16 && b == Float16) {
		return Float32
	}
	if (a == Uint32 && b == Int32) || (a == Int32 && b == Uint32) {
		return Int64
	}
	if promoteRank(a) >= promoteRank(b) {
		return a
	}
	return b
}

// BF16ToF32 widens a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows float32 to bfloat16 with round-to-nearest-even, as MLX
// and PyTorch do. NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// F32ToF16 narrows float32 to IEEE half precision with round-to-nearest-even;
// values beyond the half range become infinities.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // inf / NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right answer
	}
	return sign | uint16(r)
}

// ScalarBytes returns the little-endian bytes of v stored as dt, with C
// conversion semantics (float to int truncates toward zero; to bool is
// v != 0; 16-bit floats round to nearest even). Backends use it to fill
// arrays with a scalar.
func ScalarBytes(v float64, dt DType) []byte {
	out := make([]byte, dt.Size())
	le := binary.LittleEndian
	switch dt {
	case Bool:
		if v != 0 {
			out[0] = 1
		}
	case Uint8:
		out[0] = uint8(int64(v))
	case Int32:
		le.PutUint32(out, uint32(int32(int64(v))))
	case Uint32:
		le.PutUint32(out, uint32(int64(v)))
	case Int64:
		le.PutUint64(out, uint64(int64(v)))
	case Float16:
		le.PutUint16(out, F32ToF16(float32(v)))
	case BFloat16:
		le.PutUint16(out, F32ToBF16(float32(v)))
	case Float32:
		le.PutUint32(out, math.Float32bits(float32(v)))
	}
	return out
}

// RoundTo rounds v to the nearest value dt can hold (round to nearest
// even; unchanged for float32 and non-16-bit types): what storing v in dt
// and reading it back gives.
func RoundTo(v float32, dt DType) float32 {
	switch dt {
	case BFloat16:
		return BF16ToF32(F32ToBF16(v))
	case Float16:
		return F16ToF32(F32ToF16(v))
	}
	return v
}
