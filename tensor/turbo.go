package tensor

// TurboLayout describes TurboQuant-coded keys and values as kv's
// TurboQuant caches store them: one row of bytes per token and KV head.
//
// A key row (KeyDim values, KeyBits wide) holds the KeyDim codes as a
// little-endian bitstream (code j at bit j·KeyBits; 8-bit codes are int8
// bytes, narrower ones unsigned), then for each group of Group values its
// scale s and bias m as float16: key j decodes to code·s + m.
//
// A value row (ValueDim values, ValueBits wide) holds its codes the same
// way (unsigned), then one float16 scale σ per group: value j decodes, in
// the rotated domain, to Levels[code]·σ. The original value vector is
// Signs·H(rotated)/√ValueDim, H the Walsh–Hadamard matrix, so attention
// can sum rotated values and transform its output once.
type TurboLayout struct {
	KeyBits, ValueBits int
	KeyDim, ValueDim   int
	Group              int
	Levels             []float32 // 2^ValueBits reconstruction levels
	Signs              []float32 // ValueDim fixed ±1 signs
}

// KeyBytes is the length of a key row.
func (l TurboLayout) KeyBytes() int { return l.KeyDim*l.KeyBits/8 + 4*(l.KeyDim/l.Group) }

// ValueBytes is the length of a value row.
func (l TurboLayout) ValueBytes() int { return l.ValueDim*l.ValueBits/8 + 2*(l.ValueDim/l.Group) }

// TurboAttention is implemented by backends that attend over
// TurboQuant-coded keys and values in place. q is [B, Hq, L, KeyDim];
// keys [B, Hkv, T, KeyBytes] and values [B, Hkv, T, ValueBytes] are uint8
// rows in l's format; the options are SDPA's (sinks excepted: callers
// decode instead). The result, [B, Hq, L, ValueDim] in q's dtype, is
// attention over the decoded keys and values, transformed back to the
// original value domain. Callers without it decode and use SDPA.
type TurboAttention interface {
	SDPATurbo(q, keys, values *Array, l TurboLayout, o SDPAOptions) *Array
}
