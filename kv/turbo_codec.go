package kv

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
)

// TurboGroup is the group size of TurboQuant's per-group scales, along
// the head dim, for keys and values alike.
const TurboGroup = 32

// Supported TurboQuant widths and head dims.
var (
	TurboKeyBits   = []int{2, 4, 5, 8}
	TurboValueBits = []int{2, 3, 4, 5, 8}
	TurboHeadDims  = []int{64, 128, 256, 512}
)

// TurboSpec is a TurboQuant KV scheme: keys affine-quantized (unrotated)
// with KeyBits, values rotated by fixed signs and a Walsh–Hadamard
// transform and snapped to a ValueBits Lloyd–Max codebook, both in groups
// of TurboGroup along the head dim. The byte layout of one token of one
// KV head is tensor.TurboLayout's.
//
// With QJL (the paper's variant, "turbo-qjl"), keys are rotated like
// values and coded in two stages: KeyBits−1 bits of Lloyd–Max codes per
// channel, then one bit per channel of a quantized Johnson–Lindenstrauss
// sketch of the residual (the signs of S·r for a fixed Gaussian S) and the
// residual's norm, which make inner products with the decoded key
// unbiased. Attention decodes such keys (no fused kernel).
type TurboSpec struct {
	KeyBits, ValueBits int
	QJL                bool
}

// TurboQJLKeyBits are the key widths the QJL variant takes (its first
// stage uses one bit fewer).
var TurboQJLKeyBits = []int{3, 4, 5}

// DefaultTurbo is the scheme "turbo" names alone: 8-bit keys, 3-bit values.
var DefaultTurbo = TurboSpec{KeyBits: 8, ValueBits: 3}

// DefaultTurboQJL is the scheme "turbo-qjl" names alone: 4-bit keys (3
// bits of codes and the 1-bit residual sketch), 3-bit values.
var DefaultTurboQJL = TurboSpec{KeyBits: 4, ValueBits: 3, QJL: true}

// ParseKVQuant parses a --kv-quant value: "turbo" (DefaultTurbo),
// "turbo:k<bits>v<bits>" (e.g. "turbo:k4v3"), "turbo-qjl"
// (DefaultTurboQJL) or "turbo-qjl:k<bits>v<bits>".
func ParseKVQuant(s string) (TurboSpec, error) {
	name, arg, has := strings.Cut(s, ":")
	if name != "turbo" && name != "turbo-qjl" {
		return TurboSpec{}, fmt.Errorf("kv: unknown KV quantization %q (want turbo[:k<bits>v<bits>] or turbo-qjl[:k<bits>v<bits>])", s)
	}
	qjl := name == "turbo-qjl"
	if !has {
		if qjl {
			return DefaultTurboQJL, nil
		}
		return DefaultTurbo, nil
	}
	k, v, ok := strings.Cut(strings.TrimPrefix(arg, "k"), "v")
	kb, err1 := strconv.Atoi(k)
	vb, err2 := strconv.Atoi(v)
	if !strings.HasPrefix(arg, "k") || !ok || err1 != nil || err2 != nil {
		return TurboSpec{}, fmt.Errorf("kv: bad TurboQuant scheme %q (want turbo:k<bits>v<bits>, e.g. turbo:k8v3)", s)
	}
	spec := TurboSpec{KeyBits: kb, ValueBits: vb, QJL: qjl}
	return spec, spec.valid()
}

// String is the scheme's name as ParseKVQuant reads it.
func (s TurboSpec) String() string {
	if s.QJL {
		return fmt.Sprintf("turbo-qjl:k%dv%d", s.KeyBits, s.ValueBits)
	}
	return fmt.Sprintf("turbo:k%dv%d", s.KeyBits, s.ValueBits)
}

func (s TurboSpec) valid() error {
	okK, okV := false, false
	keyBits := TurboKeyBits
	if s.QJL {
		keyBits = TurboQJLKeyBits
	}
	for _, b := range keyBits {
		okK = okK || b == s.KeyBits
	}
	for _, b := range TurboValueBits {
		okV = okV || b == s.ValueBits
	}
	if !okK || !okV {
		return fmt.Errorf("kv: %s: %d-bit keys and %d-bit values are not supported (key bits %v, value bits %v)",
			s, s.KeyBits, s.ValueBits, keyBits, TurboValueBits)
	}
	return nil
}

// Check reports whether the scheme can store keys and values of these
// head dims (each must be one of TurboHeadDims), with the numbers when not.
func (s TurboSpec) Check(keyDim, valueDim int) error {
	if err := s.valid(); err != nil {
		return err
	}
	for _, d := range []int{keyDim, valueDim} {
		ok := false
		for _, h := range TurboHeadDims {
			ok = ok || h == d
		}
		if !ok {
			return fmt.Errorf("kv: %s cannot store head dim %d (keys %d, values %d): TurboQuant takes head dims %v",
				s, d, keyDim, valueDim, TurboHeadDims)
		}
	}
	return nil
}

// KeyBytes is the size of one token's key of one KV head.
func (s TurboSpec) KeyBytes(d int) int {
	if s.QJL {
		// codes, a float16 RMS per group, d sign bits, the residual norm
		return d*(s.KeyBits-1)/8 + 2*(d/TurboGroup) + d/8 + 2
	}
	return d*s.KeyBits/8 + 4*(d/TurboGroup)
}

// ValueBytes is the size of one token's value of one KV head.
func (s TurboSpec) ValueBytes(d int) int { return d*s.ValueBits/8 + 2*(d/TurboGroup) }

// keyDim and valueDim invert KeyBytes and ValueBytes.
func (s TurboSpec) keyDim(n int) int {
	if s.QJL {
		return 16 * (n - 2) / (2*s.KeyBits + 1)
	}
	return 8 * n / (s.KeyBits + 1)
}
func (s TurboSpec) valueDim(n int) int { return 16 * n / (2*s.ValueBits + 1) }

// ---- the codec of one vector ----

// turboBook is a value codebook: its levels and the decision thresholds
// between them (midpoints), in float64 as the reference computes them.
type turboBook struct {
	levels     []float64
	levels32   []float32
	thresholds []float64
}

var turboBooks = func() map[int]*turboBook {
	out := make(map[int]*turboBook, len(turboLevels))
	for b, c := range turboLevels {
		bk := &turboBook{levels: c}
		for i := range c {
			bk.levels32 = append(bk.levels32, float32(c[i]))
			if i+1 < len(c) {
				bk.thresholds = append(bk.thresholds, (c[i]+c[i+1])/2)
			}
		}
		out[b] = bk
	}
	return out
}()

// turboSigns are the fixed ±1 signs applied before the value transform:
// bit 0 of successive splitmix64 outputs from seed 42 (1 means -1); the
// first d serve head dim d.
var turboSigns = func() []float64 {
	out := make([]float64, 512)
	s := uint64(42)
	for i := range out {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		out[i] = 1
		if z&1 == 1 {
			out[i] = -1
		}
	}
	return out
}()

// f16Bits rounds x to the nearest float16 (ties to even) after clamping
// it to ±65504, from float64 directly (no double rounding).
func f16Bits(x float64) uint16 {
	if math.IsNaN(x) {
		return 0x7e00
	}
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	x = min(x, 65504)
	if x == 0 {
		return sign
	}
	frac, exp := math.Frexp(x) // x = frac·2^exp, frac in [0.5, 1)
	e := exp - 1
	if e < -14 { // subnormal: multiples of 2^-24
		return sign | uint16(math.RoundToEven(math.Ldexp(x, 24)))
	}
	r := math.RoundToEven(frac * 2048) // in [1024, 2048]
	if r == 2048 {
		r, e = 1024, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(r-1024)
}

// f16Value is the value of float16 bits.
func f16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+m, e-25)
}

// packCodes writes codes as a little-endian bitstream of b bits each.
func packCodes(dst []byte, codes []int32, b int) {
	clear(dst[:len(codes)*b/8])
	mask := uint64(1)<<b - 1
	for j, q := range codes {
		pos := j * b
		w := (uint64(q) & mask) << (pos & 7)
		for i := pos >> 3; w != 0; i++ {
			dst[i] |= byte(w)
			w >>= 8
		}
	}
}

// unpackCode reads code j of a b-bit bitstream (unsigned).
func unpackCode(src []byte, j, b int) uint32 {
	pos := j * b
	i := pos >> 3
	var w uint32
	for k := 0; k < 2 && i+k < len(src); k++ {
		w |= uint32(src[i+k]) << (8 * k)
	}
	return w >> (pos & 7) & (1<<b - 1)
}

// fwht is the in-place Walsh–Hadamard butterfly (unnormalised), strides
// 1, 2, 4, ...: the reference's order.
func fwht(y []float64) {
	d := len(y)
	for h := 1; h < d; h *= 2 {
		for i := 0; i < d; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := y[j], y[j+h]
				y[j], y[j+h] = a+b, a-b
			}
		}
	}
}

// turboScratch holds one vector's temporaries.
type turboScratch struct {
	y, res []float64
	codes  []int32
}

func (s *turboScratch) size(d int) {
	if cap(s.y) < d {
		s.y, s.res, s.codes = make([]float64, d), make([]float64, d), make([]int32, d)
	}
	s.y, s.res, s.codes = s.y[:d], s.res[:d], s.codes[:d]
}

// encodeKey writes one key vector x (len d, a multiple of TurboGroup) as
// KeyBytes(d) bytes into dst.
func encodeKey(dst []byte, x []float32, b int, s *turboScratch) {
	d := len(x)
	s.size(d)
	meta := dst[d*b/8:]
	for g := 0; g < d; g += TurboGroup {
		grp := x[g : g+TurboGroup]
		mn, mx := float64(grp[0]), float64(grp[0])
		for _, v := range grp {
			mn, mx = min(mn, float64(v)), max(mx, float64(v))
		}
		var mb, sb uint16
		var lo, hi float64
		if b == 8 {
			mb = f16Bits((mx + mn) / 2)
			m := f16Value(mb)
			sb = f16Bits(max(mx-m, m-mn) / 127)
			lo, hi = -127, 127
		} else {
			mb = f16Bits(mn)
			sb = f16Bits(max(mx-f16Value(mb), 0) / float64(int(1)<<b-1))
			lo, hi = 0, float64(int(1)<<b-1)
		}
		m, sc := f16Value(mb), f16Value(sb)
		for i, v := range grp {
			q := 0.0
			if sc != 0 {
				q = min(hi, max(lo, math.RoundToEven((float64(v)-m)/sc)))
			}
			s.codes[g+i] = int32(q)
		}
		k := g / TurboGroup * 4
		meta[k], meta[k+1], meta[k+2], meta[k+3] = byte(sb), byte(sb>>8), byte(mb), byte(mb>>8)
	}
	packCodes(dst, s.codes, b)
}

// decodeKey reads a key written by encodeKey into out (len d).
func decodeKey(out []float32, src []byte, b int) {
	d := len(out)
	meta := src[d*b/8:]
	for g := 0; g < d; g += TurboGroup {
		k := g / TurboGroup * 4
		sc := f16Value(uint16(meta[k]) | uint16(meta[k+1])<<8)
		m := f16Value(uint16(meta[k+2]) | uint16(meta[k+3])<<8)
		for j := g; j < g+TurboGroup; j++ {
			var q float64
			if b == 8 {
				q = float64(int8(src[j]))
			} else {
				q = float64(unpackCode(src, j, b))
			}
			out[j] = float32(q*sc + m)
		}
	}
}

// encodeValue writes one value vector v (len d, a power of two ≥
// TurboGroup) as ValueBytes(d) bytes into dst.
func encodeValue(dst []byte, v []float32, b int, s *turboScratch) {
	d := len(v)
	s.size(d)
	y := s.y
	for i, a := range v {
		y[i] = turboSigns[i] * float64(a)
	}
	fwht(y)
	r := math.Sqrt(float64(d))
	for i := range y {
		y[i] /= r
	}
	bk := turboBooks[b]
	meta := dst[d*b/8:]
	for g := 0; g < d; g += TurboGroup {
		ss := 0.0
		for _, a := range y[g : g+TurboGroup] {
			ss += a * a
		}
		sb := f16Bits(math.Sqrt(ss / TurboGroup))
		sigma := f16Value(sb)
		for i := g; i < g+TurboGroup; i++ {
			u := 0.0
			if sigma != 0 {
				u = y[i] / sigma
			}
			s.codes[i] = int32(searchBelow(bk.thresholds, u))
		}
		k := g / TurboGroup * 2
		meta[k], meta[k+1] = byte(sb), byte(sb>>8)
	}
	packCodes(dst, s.codes, b)
}

// searchBelow is the number of thresholds smaller than u (bisect_left).
func searchBelow(t []float64, u float64) int {
	lo, hi := 0, len(t)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// decodeValueRotated reads a value written by encodeValue into out (len
// d) in the rotated domain: level·sigma, as float64 in y and float32 in out
// (either may be nil).
func decodeValueRotated(y []float64, out []float32, src []byte, d, b int) {
	lv := turboBooks[b].levels
	meta := src[d*b/8:]
	for g := 0; g < d; g += TurboGroup {
		k := g / TurboGroup * 2
		sigma := f16Value(uint16(meta[k]) | uint16(meta[k+1])<<8)
		for j := g; j < g+TurboGroup; j++ {
			a := lv[unpackCode(src, j, b)] * sigma
			if y != nil {
				y[j] = a
			}
			if out != nil {
				out[j] = float32(a)
			}
		}
	}
}

// decodeValue reads a value written by encodeValue back into the original
// domain (out has len d).
func decodeValue(out []float32, src []byte, b int, s *turboScratch) {
	d := len(out)
	s.size(d)
	decodeValueRotated(s.y, nil, src, d, b)
	unrotate(s.y)
	for i, a := range s.y {
		out[i] = float32(a)
	}
}

// unrotate inverts the value transform in place: signs·H(y)/√d.
func unrotate(y []float64) {
	fwht(y)
	r := math.Sqrt(float64(len(y)))
	for i := range y {
		y[i] = turboSigns[i] * (y[i] / r)
	}
}

// ---- the QJL key variant ----

// qjlMatrices are the fixed Gaussian sketch matrices S (d×d, row-major)
// of each head dim: N(0, 1) draws by Box–Muller from splitmix64 seeded
// with 4242 + d.
var qjlMatrices sync.Map // int → []float64

func qjlMatrix(d int) []float64 {
	if m, ok := qjlMatrices.Load(d); ok {
		return m.([]float64)
	}
	m := make([]float64, d*d)
	s := uint64(4242 + d)
	next := func() float64 {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		return (float64(z>>11) + 0.5) / (1 << 53) // in (0, 1)
	}
	for i := 0; i < len(m); i += 2 {
		u, v := next(), next()
		r := math.Sqrt(-2 * math.Log(u))
		m[i], m[i+1] = r*math.Cos(2*math.Pi*v), r*math.Sin(2*math.Pi*v)
	}
	got, _ := qjlMatrices.LoadOrStore(d, m)
	return got.([]float64)
}

// rotateInto writes the value transform of x into y: H(signs·x)/√d.
func rotateInto(y []float64, x []float32) {
	for i, a := range x {
		y[i] = turboSigns[i] * float64(a)
	}
	fwht(y)
	r := math.Sqrt(float64(len(y)))
	for i := range y {
		y[i] /= r
	}
}

// encodeKeyQJL writes one key (len d) as KeyBytes(d) bytes of the QJL
// variant: rotated, b−1-bit Lloyd–Max codes with a float16 RMS per group
// (as values), then the signs of S·r for the residual r (bit i set when
// (S·r)_i ≥ 0) and ‖r‖ as float16.
func encodeKeyQJL(dst []byte, x []float32, b int, s *turboScratch) {
	d := len(x)
	s.size(d)
	y := s.y
	rotateInto(y, x)
	bk := turboBooks[b-1]
	nc := d * (b - 1) / 8
	meta := dst[nc:]
	res := s.res
	for g := 0; g < d; g += TurboGroup {
		ss := 0.0
		for _, a := range y[g : g+TurboGroup] {
			ss += a * a
		}
		sb := f16Bits(math.Sqrt(ss / TurboGroup))
		sigma := f16Value(sb)
		for i := g; i < g+TurboGroup; i++ {
			u := 0.0
			if sigma != 0 {
				u = y[i] / sigma
			}
			q := searchBelow(bk.thresholds, u)
			s.codes[i] = int32(q)
			res[i] = y[i] - bk.levels[q]*sigma
		}
		k := g / TurboGroup * 2
		meta[k], meta[k+1] = byte(sb), byte(sb>>8)
	}
	packCodes(dst, s.codes, b-1)
	signs := meta[2*(d/TurboGroup):]
	clear(signs[:d/8])
	sk := qjlMatrix(d)
	norm := 0.0
	for _, a := range res {
		norm += a * a
	}
	for i := range d {
		p := 0.0
		for j, a := range sk[i*d : (i+1)*d] {
			p += a * res[j]
		}
		if p >= 0 {
			signs[i/8] |= 1 << (i % 8)
		}
	}
	nb := f16Bits(math.Sqrt(norm))
	signs[d/8], signs[d/8+1] = byte(nb), byte(nb>>8)
}

// decodeKeyQJL reads a key written by encodeKeyQJL: the first stage's
// levels plus ‖r‖·√(π/2)/d · Sᵀ·sign, rotated back.
func decodeKeyQJL(out []float32, src []byte, b int, s *turboScratch) {
	d := len(out)
	s.size(d)
	y := s.y
	decodeValueRotated(y, nil, src, d, b-1)
	signs := src[d*(b-1)/8+2*(d/TurboGroup):]
	norm := f16Value(uint16(signs[d/8]) | uint16(signs[d/8+1])<<8)
	if norm != 0 {
		c := norm * math.Sqrt(math.Pi/2) / float64(d)
		sk := qjlMatrix(d)
		for i := range d {
			z := -c
			if signs[i/8]>>(i%8)&1 == 1 {
				z = c
			}
			for j, a := range sk[i*d : (i+1)*d] {
				y[j] += z * a
			}
		}
	}
	unrotate(y)
	for i, a := range y {
		out[i] = float32(a)
	}
}
