package safetensors

import "github.com/mlxgo/mlxgo/tensor"

// rawDType describes one dtype code a safetensors header may name.
type rawDType struct {
	bits int          // element width in bits (sub-byte types exist)
	dt   tensor.DType // the tensor package's equivalent, or tensor.Invalid
	// rank is the code's position in the reference implementation's dtype
	// list; its writer stores tensors by decreasing rank, which groups them
	// by decreasing width (keeping each aligned), and so does Write, so
	// that both produce the same bytes.
	rank int
}

// rawDTypes lists every dtype the reference implementation knows. Only
// some have a tensor.DType; the others can still be opened and read as
// bytes, so a checkpoint that carries an odd tensor remains usable.
var rawDTypes = map[string]rawDType{
	"BOOL":        {8, tensor.Bool, 0},
	"F4":          {4, tensor.Invalid, 1},
	"F6_E2M3":     {6, tensor.Invalid, 2},
	"F6_E3M2":     {6, tensor.Invalid, 3},
	"U8":          {8, tensor.Uint8, 4},
	"I8":          {8, tensor.Invalid, 5},
	"F8_E5M2":     {8, tensor.Invalid, 6},
	"F8_E4M3":     {8, tensor.Invalid, 7},
	"F8_E8M0":     {8, tensor.Invalid, 8},
	"F8_E4M3FNUZ": {8, tensor.Invalid, 9},
	"F8_E5M2FNUZ": {8, tensor.Invalid, 10},
	"I16":         {16, tensor.Invalid, 11},
	"U16":         {16, tensor.Invalid, 12},
	"F16":         {16, tensor.Float16, 13},
	"BF16":        {16, tensor.BFloat16, 14},
	"I32":         {32, tensor.Int32, 15},
	"U32":         {32, tensor.Uint32, 16},
	"F32":         {32, tensor.Float32, 17},
	"C64":         {64, tensor.Invalid, 18},
	"F64":         {64, tensor.Invalid, 19},
	"I64":         {64, tensor.Int64, 20},
	"U64":         {64, tensor.Invalid, 21},
}

// DTypeCode returns the safetensors code for a tensor dtype ("BF16" for
// tensor.BFloat16), or "" when dt is not a valid dtype. Writers need it to
// produce headers other tools accept.
func DTypeCode(dt tensor.DType) string {
	switch dt {
	case tensor.Bool:
		return "BOOL"
	case tensor.Uint8:
		return "U8"
	case tensor.Int32:
		return "I32"
	case tensor.Uint32:
		return "U32"
	case tensor.Int64:
		return "I64"
	case tensor.Float16:
		return "F16"
	case tensor.BFloat16:
		return "BF16"
	case tensor.Float32:
		return "F32"
	}
	return ""
}

// DTypeBits returns the element width in bits of a safetensors dtype code
// and whether the code is known at all; converters use it to size tensors
// the tensor package cannot represent.
func DTypeBits(code string) (int, bool) {
	r, ok := rawDTypes[code]
	return r.bits, ok
}

// dtypeCodes maps each code to itself, to intern the strings read from
// headers.
var dtypeCodes = func() map[string]string {
	m := make(map[string]string, len(rawDTypes))
	for k := range rawDTypes {
		m[k] = k
	}
	return m
}()
