package backendtest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

var (
	floatTypes = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16}
	intTypes   = []tensor.DType{tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Uint32}
	allTypes   = []tensor.DType{tensor.Bool, tensor.Uint8, tensor.Int32, tensor.Uint32, tensor.Int64, tensor.Float16, tensor.BFloat16, tensor.Float32}
)

// ---- creation ----

func creationCases() []testCase {
	var cs []testCase
	for _, dt := range allTypes {
		cs = append(cs, testCase{"Full/" + dt.String(), func(c *checker) {
			v := 3.0
			if dt == tensor.Bool {
				v = 1
			}
			a := c.T(tensor.Full([]int{2, 3}, v, dt))
			want := make([]float64, 6)
			for i := range want {
				want[i] = v
			}
			c.check("Full", a, []int{2, 3}, dt, want, tol{})
			z := c.T(tensor.Zeros([]int{4}, dt))
			c.check("Zeros", z, []int{4}, dt, make([]float64, 4), tol{})
			o := c.T(tensor.Ones([]int{1, 2, 1}, dt))
			c.check("Ones", o, []int{1, 2, 1}, dt, []float64{1, 1}, tol{})
			e := c.T(tensor.Zeros([]int{0, 3}, dt))
			c.check("Zeros empty", e, []int{0, 3}, dt, nil, tol{})
			s := c.T(tensor.Scalar(1, dt))
			c.check("Scalar", s, []int{}, dt, []float64{1}, tol{})
		}})
	}
	cs = append(cs,
		testCase{"Full/rounding", func(c *checker) {
			a := c.T(tensor.Full([]int{3}, 1.0/3, tensor.BFloat16))
			w := roundTo(1.0/3, tensor.BFloat16)
			c.check("Full bf16", a, []int{3}, tensor.BFloat16, []float64{w, w, w}, tol{})
			b := c.T(tensor.Full([]int{2}, -2.7, tensor.Int32))
			c.check("Full int32 truncates", b, []int{2}, tensor.Int32, []float64{-2, -2}, tol{})
		}},
		testCase{"Arange/float32", func(c *checker) {
			a := c.T(tensor.Arange(0, 3, 0.5, tensor.Float32))
			c.check("Arange", a, []int{6}, tensor.Float32, []float64{0, 0.5, 1, 1.5, 2, 2.5}, tol{})
		}},
		testCase{"Arange/int32", func(c *checker) {
			a := c.T(tensor.Arange(2, 9, 3, tensor.Int32))
			c.check("Arange", a, []int{3}, tensor.Int32, []float64{2, 5, 8}, tol{})
		}},
		testCase{"Arange/negative-step", func(c *checker) {
			a := c.T(tensor.Arange(5, 0, -2, tensor.Int64))
			c.check("Arange", a, []int{3}, tensor.Int64, []float64{5, 3, 1}, tol{})
		}},
		testCase{"Arange/empty", func(c *checker) {
			a := c.T(tensor.Arange(3, 1, 1, tensor.Float32))
			c.check("Arange", a, []int{0}, tensor.Float32, nil, tol{})
		}},
		testCase{"Arange/bfloat16", func(c *checker) {
			a := c.T(tensor.Arange(0, 300, 37, tensor.BFloat16))
			var want []float64
			for v := 0.0; v < 300; v += 37 {
				want = append(want, roundTo(v, tensor.BFloat16))
			}
			c.check("Arange", a, []int{len(want)}, tensor.BFloat16, want, tol{})
		}},
		testCase{"FromFloat32", func(c *checker) {
			data := []float32{1, -2.5, 1.0 / 3, 65504, 1e-3, float32(math.Inf(-1))}
			for _, dt := range floatTypes {
				a := c.T(tensor.FromFloat32(data, []int{2, 3}, dt))
				want := make([]float64, len(data))
				for i, v := range data {
					want[i] = roundTo(float64(v), dt)
				}
				c.check("FromFloat32 "+dt.String(), a, []int{2, 3}, dt, want, tol{})
				f := a.Float32s()
				for i := range f {
					if float64(f[i]) != want[i] {
						c.Errorf("Float32s %s[%d] = %v, want %v", dt, i, f[i], want[i])
					}
				}
			}
		}},
		testCase{"FromInts", func(c *checker) {
			data := []int{0, 1, 7, 100, 255, 3}
			for _, dt := range []tensor.DType{tensor.Uint8, tensor.Int32, tensor.Uint32, tensor.Int64, tensor.Float32} {
				a := c.T(tensor.FromInts(data, []int{3, 2}, dt))
				want := make([]float64, len(data))
				for i, v := range data {
					want[i] = float64(v)
				}
				c.check("FromInts "+dt.String(), a, []int{3, 2}, dt, want, tol{})
			}
			n := c.T(tensor.FromInts([]int{-5, 1 << 40, -(1 << 40)}, nil, tensor.Int64))
			c.check("FromInts int64", n, []int{3}, tensor.Int64, []float64{-5, 1 << 40, -(1 << 40)}, tol{})
		}},
		testCase{"FromBools", func(c *checker) {
			a := c.T(tensor.FromBools([]bool{true, false, true, true}, []int{2, 2}))
			c.check("FromBools", a, []int{2, 2}, tensor.Bool, []float64{1, 0, 1, 1}, tol{})
			b := a.Bools()
			if !b[0] || b[1] || !b[2] || !b[3] {
				c.Errorf("Bools = %v", b)
			}
		}},
		testCase{"Bytes/layout", func(c *checker) {
			// Bytes must return row-major little-endian bytes for views too.
			a, av := c.in([]int{3, 4}, tensor.Int32, ints(-1000, 1000), transposed)
			raw := a.Bytes()
			if len(raw) != 12*4 {
				c.Errorf("Bytes: %d bytes, want 48", len(raw))
				return
			}
			for i := range av {
				if got := int32(binary.LittleEndian.Uint32(raw[4*i:])); float64(got) != av[i] {
					c.Errorf("Bytes[%d] = %d, want %v", i, got, av[i])
					return
				}
			}
			u := c.T(tensor.FromUint32([]uint32{0xdeadbeef, 1}, nil))
			ub := u.Bytes()
			if binary.LittleEndian.Uint32(ub) != 0xdeadbeef || binary.LittleEndian.Uint32(ub[4:]) != 1 {
				c.Errorf("uint32 Bytes = %x", ub)
			}
		}},
		testCase{"Eval+AsyncEval", func(c *checker) {
			// lazy backends compute here; eager ones must accept the calls
			a, av := c.in([]int{3, 4}, tensor.Float32, uni(-1, 1), transposed)
			b := c.T(tensor.Exp(a))
			d := c.T(tensor.Add(b, a))
			tensor.AsyncEval(d)
			tensor.Eval(b, d, nil)
			want := make([]float64, len(av))
			for i, x := range av {
				want[i] = math.Exp(x) + x
			}
			c.check("Exp(a)+a after Eval", d, []int{3, 4}, tensor.Float32, want, tolFor(tensor.Float32, true))
		}},
		testCase{"FromFloat64+FromInt32+Like+Item", func(c *checker) {
			f := c.T(tensor.FromFloat64([]float64{0.1, -2}, nil, tensor.BFloat16))
			c.check("FromFloat64", f, []int{2}, tensor.BFloat16, []float64{roundTo(0.1, tensor.BFloat16), -2}, tol{})
			i := c.T(tensor.FromInt32([]int32{-7, 1 << 30}, []int{2, 1}))
			c.check("FromInt32", i, []int{2, 1}, tensor.Int32, []float64{-7, 1 << 30}, tol{})
			if got := i.Int32s(); got[0] != -7 || got[1] != 1<<30 {
				c.Errorf("Int32s = %v", got)
			}
			z := c.T(tensor.ZerosLike(i))
			c.check("ZerosLike", z, []int{2, 1}, tensor.Int32, []float64{0, 0}, tol{})
			fl := c.T(tensor.FullLike(f, 3.5))
			c.check("FullLike", fl, []int{2}, tensor.BFloat16, []float64{3.5, 3.5}, tol{})
			s := c.T(tensor.Scalar(-4.25, tensor.Float32))
			if s.Item() != -4.25 || s.ItemInt() != -4 {
				c.Errorf("Item = %v, ItemInt = %v; want -4.25, -4", s.Item(), s.ItemInt())
			}
			k := c.T(tensor.Key(0x0123456789abcdef))
			c.check("Key", k, []int{2}, tensor.Uint32, []float64{0x01234567, 0x89abcdef}, tol{})
			if tensor.PackedDim(64, 3) != 6 {
				c.Errorf("PackedDim(64, 3) = %d", tensor.PackedDim(64, 3))
			}
		}},
		testCase{"Scope", func(c *checker) {
			// a scope frees through the backend everything made in it but what it keeps
			before := tensor.LiveArrays()
			var kept *tensor.Array
			func() {
				s := tensor.NewScope()
				defer s.Close()
				a := tensor.Full([]int{3}, 2, tensor.Float32)
				b := tensor.Exp(a)
				kept = s.Keep(tensor.Add(a, b))
				if s.Len() != 2 {
					c.Errorf("scope holds %d arrays, want 2", s.Len())
				}
			}()
			c.T(kept)
			if n := tensor.LiveArrays() - before; n != 1 {
				c.Errorf("after Close %d arrays are live, want the kept one", n)
			}
			e := math.Exp(2) + 2
			c.check("kept array", kept, []int{3}, tensor.Float32, []float64{e, e, e}, tolFor(tensor.Float32, true))
		}},
		testCase{"FromBytes/noCopy", func(c *checker) {
			raw := encodeVals([]float64{1, 2, 3, 4}, tensor.Float32)
			a := c.T(tensor.FromBytesOn(c.be, raw, []int{4}, tensor.Float32, true))
			c.check("FromBytes noCopy", a, []int{4}, tensor.Float32, []float64{1, 2, 3, 4}, tol{})
		}},
	)
	return cs
}

// ---- unary ----

type unarySpec struct {
	name  string
	f     func(*tensor.Array) *tensor.Array
	ref   func(float64) float64
	g     gen
	loose bool
	ints  bool // also defined on integers, keeping the dtype
}

func erfGelu(x float64) float64 { return x / 2 * (1 + math.Erf(x/math.Sqrt2)) }
func tanhGelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}
func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return x
}

var unarySpecs = []unarySpec{
	{"Neg", tensor.Neg, func(x float64) float64 { return -x }, uni(-3, 3), false, true},
	{"Abs", tensor.Abs, math.Abs, uni(-3, 3), false, true},
	{"Sign", tensor.Sign, sign, pick(-2.5, -1, 0, 0.25, 3), false, true},
	{"Square", tensor.Square, func(x float64) float64 { return x * x }, uni(-3, 3), false, true},
	{"Sqrt", tensor.Sqrt, math.Sqrt, uni(0, 5), false, false},
	{"Rsqrt", tensor.Rsqrt, func(x float64) float64 { return 1 / math.Sqrt(x) }, uni(0.1, 5), false, false},
	{"Reciprocal", tensor.Reciprocal, func(x float64) float64 { return 1 / x }, awayFromZero(0.2, 4), false, false},
	{"Exp", tensor.Exp, math.Exp, uni(-4, 4), true, false},
	{"Log", tensor.Log, math.Log, uni(0.05, 8), true, false},
	{"Log1p", tensor.Log1p, math.Log1p, uni(-0.9, 3), true, false},
	{"Sin", tensor.Sin, math.Sin, uni(-4, 4), true, false},
	{"Cos", tensor.Cos, math.Cos, uni(-4, 4), true, false},
	{"Tanh", tensor.Tanh, math.Tanh, uni(-4, 4), true, false},
	{"Sigmoid", tensor.Sigmoid, sigmoid, uni(-8, 8), true, false},
	{"Softplus", tensor.Softplus, func(x float64) float64 { return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) }, uni(-30, 30), true, false},
	{"Erf", tensor.Erf, math.Erf, uni(-3, 3), true, false},
	{"Gelu", tensor.Gelu, erfGelu, uni(-5, 5), true, false},
	{"GeluApprox", tensor.GeluApprox, tanhGelu, uni(-5, 5), true, false},
	{"Silu", tensor.Silu, func(x float64) float64 { return x * sigmoid(x) }, uni(-8, 8), true, false},
	{"Floor", tensor.Floor, math.Floor, uni(-5, 5), false, true},
	{"Ceil", tensor.Ceil, math.Ceil, uni(-5, 5), false, true},
	{"Round", tensor.Round, math.RoundToEven, pick(-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.25, -3.75, 0.49, 7), false, true},
}

func unaryCases() []testCase {
	var cs []testCase
	for _, sp := range unarySpecs {
		for _, dt := range floatTypes {
			shape := []int{3, 17}
			lay := dense
			if dt == tensor.Float32 {
				lay = transposed
			}
			cs = append(cs, testCase{fmt.Sprintf("%s/%s/%v/%s", sp.name, dt, shape, lay), func(c *checker) {
				a, av := c.in(shape, dt, sp.g, lay)
				want := make([]float64, len(av))
				for i, x := range av {
					want[i] = sp.ref(x)
				}
				c.check(sp.name, c.T(sp.f(a)), shape, dt, want, tolFor(dt, sp.loose))
			}})
		}
		// a strided view and an empty array, float32
		cs = append(cs, testCase{sp.name + "/float32/step+empty", func(c *checker) {
			a, av := c.in([]int{2, 3, 5}, tensor.Float32, sp.g, strided)
			want := make([]float64, len(av))
			for i, x := range av {
				want[i] = sp.ref(x)
			}
			c.check(sp.name+" strided", c.T(sp.f(a)), []int{2, 3, 5}, tensor.Float32, want, tolFor(tensor.Float32, sp.loose))
			e := c.T(tensor.Zeros([]int{2, 0}, tensor.Float32))
			c.check(sp.name+" empty", c.T(sp.f(e)), []int{2, 0}, tensor.Float32, nil, tol{})
		}})
		if sp.ints {
			cs = append(cs, testCase{sp.name + "/int32", func(c *checker) {
				g := ints(-50, 50)
				a, av := c.in([]int{4, 5}, tensor.Int32, g, dense)
				want := make([]float64, len(av))
				for i, x := range av {
					want[i] = sp.ref(x)
				}
				c.check(sp.name, c.T(sp.f(a)), []int{4, 5}, tensor.Int32, want, tol{})
			}})
		} else {
			// integer input is computed in float32
			cs = append(cs, testCase{sp.name + "/int32→float32", func(c *checker) {
				vals := []float64{1, 2, 3, 4}
				a := c.arr(vals, []int{4}, tensor.Int32)
				want := make([]float64, 4)
				for i, x := range vals {
					want[i] = sp.ref(x)
				}
				c.check(sp.name, c.T(sp.f(a)), []int{4}, tensor.Float32, want, tolFor(tensor.Float32, sp.loose))
			}})
		}
	}
	inf, nan := math.Inf(1), math.NaN()
	special := []float64{0, -1.5, inf, -inf, nan, 3, nan, -0.0}
	for _, dt := range floatTypes {
		cs = append(cs, testCase{"IsNaN+IsInf/" + dt.String(), func(c *checker) {
			a := c.arr(special, []int{2, 4}, dt)
			wn := make([]float64, len(special))
			wi := make([]float64, len(special))
			for i, x := range special {
				if math.IsNaN(x) {
					wn[i] = 1
				}
				if math.IsInf(x, 0) {
					wi[i] = 1
				}
			}
			c.check("IsNaN", c.T(tensor.IsNaN(a)), []int{2, 4}, tensor.Bool, wn, tol{})
			c.check("IsInf", c.T(tensor.IsInf(a)), []int{2, 4}, tensor.Bool, wi, tol{})
		}})
	}
	cs = append(cs,
		testCase{"IsNaN/int32", func(c *checker) {
			a := c.arr([]float64{1, 2}, []int{2}, tensor.Int32)
			c.check("IsNaN", c.T(tensor.IsNaN(a)), []int{2}, tensor.Bool, []float64{0, 0}, tol{})
		}},
		testCase{"special-values/float32", func(c *checker) {
			a := c.arr([]float64{inf, -inf, 0, nan}, []int{4}, tensor.Float32)
			c.check("Exp", c.T(tensor.Exp(a)), []int{4}, tensor.Float32, []float64{inf, 0, 1, nan}, tol{})
			c.check("Sigmoid", c.T(tensor.Sigmoid(a)), []int{4}, tensor.Float32, []float64{1, 0, 0.5, nan}, tol{1e-6, 1e-7})
			c.check("Tanh", c.T(tensor.Tanh(a)), []int{4}, tensor.Float32, []float64{1, -1, 0, nan}, tol{1e-6, 1e-7})
			b := c.arr([]float64{0, -1, 1e-30}, []int{3}, tensor.Float32)
			c.check("Log", c.T(tensor.Log(b)), []int{3}, tensor.Float32, []float64{-inf, nan, math.Log(float64(float32(1e-30)))}, tol{1e-5, 0})
			c.check("Log1p tiny", c.T(tensor.Log1p(c.arr([]float64{1e-8}, []int{1}, tensor.Float32))), []int{1}, tensor.Float32, []float64{math.Log1p(float64(float32(1e-8)))}, tol{1e-5, 0})
			c.check("Softplus large", c.T(tensor.Softplus(c.arr([]float64{100, -100}, []int{2}, tensor.Float32))), []int{2}, tensor.Float32, []float64{100, math.Exp(-100)}, tol{1e-5, 1e-30})
		}},
	)
	for _, dt := range []tensor.DType{tensor.Bool, tensor.Float32, tensor.Int32} {
		cs = append(cs, testCase{"LogicalNot/" + dt.String(), func(c *checker) {
			g := pick(0, 1, 2, -3)
			if dt == tensor.Bool {
				g = pick(0, 1)
			}
			a, av := c.in([]int{3, 4}, dt, g, transposed)
			want := make([]float64, len(av))
			for i, x := range av {
				if x == 0 {
					want[i] = 1
				}
			}
			c.check("LogicalNot", c.T(tensor.LogicalNot(a)), []int{3, 4}, tensor.Bool, want, tol{})
		}})
	}
	return cs
}

// ---- binary ----

type binarySpec struct {
	name  string
	f     func(a, b *tensor.Array) *tensor.Array
	ref   func(x, y float64) float64 // float reference
	iref  func(x, y int64) int64     // integer reference (nil: float-only or as ref)
	ga    gen                        // float inputs
	gb    gen
	types []tensor.DType
	out   func(dt tensor.DType) tensor.DType
	loose bool
}

func boolOf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func boolOut(tensor.DType) tensor.DType    { return tensor.Bool }
func sameOut(dt tensor.DType) tensor.DType { return dt }
func floatOut(dt tensor.DType) tensor.DType {
	if dt.IsFloat() {
		return dt
	}
	return tensor.Float32
}

func pyMod(x, y float64) float64 {
	r := math.Mod(x, y)
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

func pyModInt(x, y int64) int64 {
	r := x % y
	if r != 0 && (r < 0) != (y < 0) {
		r += y
	}
	return r
}

func floorDivInt(x, y int64) int64 {
	q := x / y
	if (x%y != 0) && ((x < 0) != (y < 0)) {
		q--
	}
	return q
}

func nanMax(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Max(x, y)
}

func nanMin(x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	return math.Min(x, y)
}

var (
	numTypes   = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Uint32}
	floatOnly  = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16}
	signedNum  = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64}
	bitTypes   = []tensor.DType{tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Uint32}
	ties       = pick(-2, -1, 0, 0.5, 1, 2)
	smallFloat = uni(-3, 3)
)

var binarySpecs = []binarySpec{
	{"Add", tensor.Add, func(x, y float64) float64 { return x + y }, func(x, y int64) int64 { return x + y }, smallFloat, smallFloat, numTypes, sameOut, false},
	{"Sub", tensor.Sub, func(x, y float64) float64 { return x - y }, func(x, y int64) int64 { return x - y }, smallFloat, smallFloat, numTypes, sameOut, false},
	{"Mul", tensor.Mul, func(x, y float64) float64 { return x * y }, func(x, y int64) int64 { return x * y }, smallFloat, smallFloat, numTypes, sameOut, false},
	{"Div", tensor.Div, func(x, y float64) float64 { return x / y }, nil, smallFloat, awayFromZero(0.25, 3), append(cloneTypes(floatOnly), tensor.Int32), floatOut, false},
	{"Pow", tensor.Pow, math.Pow, nil, uni(0.1, 3), uni(-2, 2), floatOnly, floatOut, true},
	{"Maximum", tensor.Maximum, nanMax, func(x, y int64) int64 { return max(x, y) }, ties, ties, numTypes, sameOut, false},
	{"Minimum", tensor.Minimum, nanMin, func(x, y int64) int64 { return min(x, y) }, ties, ties, numTypes, sameOut, false},
	{"Equal", tensor.Equal, func(x, y float64) float64 { return boolOf(x == y) }, nil, ties, ties, numTypes, boolOut, false},
	{"NotEqual", tensor.NotEqual, func(x, y float64) float64 { return boolOf(x != y) }, nil, ties, ties, numTypes, boolOut, false},
	{"Less", tensor.Less, func(x, y float64) float64 { return boolOf(x < y) }, nil, ties, ties, numTypes, boolOut, false},
	{"LessEqual", tensor.LessEqual, func(x, y float64) float64 { return boolOf(x <= y) }, nil, ties, ties, numTypes, boolOut, false},
	{"Greater", tensor.Greater, func(x, y float64) float64 { return boolOf(x > y) }, nil, ties, ties, numTypes, boolOut, false},
	{"GreaterEqual", tensor.GreaterEqual, func(x, y float64) float64 { return boolOf(x >= y) }, nil, ties, ties, numTypes, boolOut, false},
	{"LogicalAnd", tensor.LogicalAnd, func(x, y float64) float64 { return boolOf(x != 0 && y != 0) }, nil, pick(0, 1, -2), pick(0, 1, 0.5), []tensor.DType{tensor.Bool, tensor.Float32, tensor.Int32}, boolOut, false},
	{"LogicalOr", tensor.LogicalOr, func(x, y float64) float64 { return boolOf(x != 0 || y != 0) }, nil, pick(0, 1, -2), pick(0, 1, 0.5), []tensor.DType{tensor.Bool, tensor.Float32, tensor.Int32}, boolOut, false},
	{"BitwiseAnd", tensor.BitwiseAnd, nil, func(x, y int64) int64 { return x & y }, nil, nil, bitTypes, sameOut, false},
	{"BitwiseOr", tensor.BitwiseOr, nil, func(x, y int64) int64 { return x | y }, nil, nil, bitTypes, sameOut, false},
	{"BitwiseXor", tensor.BitwiseXor, nil, func(x, y int64) int64 { return x ^ y }, nil, nil, bitTypes, sameOut, false},
}

func cloneTypes(ts []tensor.DType) []tensor.DType { return append([]tensor.DType(nil), ts...) }

// intGen draws integers that dt holds, signed where it can be.
func intGen(dt tensor.DType, small bool) gen {
	hi := 1000
	if small {
		hi = 11
	}
	switch dt {
	case tensor.Uint8:
		if small {
			return ints(0, 15)
		}
		return ints(0, 255)
	case tensor.Uint32:
		if small {
			return ints(0, 60000)
		}
		return ints(0, 1<<31)
	case tensor.Int64:
		if !small {
			return ints(-(1 << 40), 1<<40)
		}
	case tensor.Bool:
		return ints(0, 1)
	}
	return ints(-hi, hi)
}

// binaryRef computes op on broadcast inputs; integer results wrap to dt.
func binaryRef(sp binarySpec, av []float64, as []int, bv []float64, bs []int, dt tensor.DType) ([]float64, []int) {
	shape := broadcastShape(as, bs)
	out := make([]float64, numel(shape))
	for i := range out {
		idx := unravel(i, shape)
		x, y := av[bcastIndex(idx, as)], bv[bcastIndex(idx, bs)]
		if sp.iref != nil && !dt.IsFloat() && sp.out(dt) == dt {
			out[i] = float64(wrapInt(sp.iref(int64(x), int64(y)), dt))
		} else {
			out[i] = sp.ref(x, y)
		}
	}
	return out, shape
}

type shapePair struct {
	a, b   []int
	la, lb layout
}

func (p shapePair) String() string {
	return fmt.Sprintf("%v%s×%v%s", p.a, p.la, p.b, p.lb)
}

func binaryCases() []testCase {
	var cs []testCase
	for _, sp := range binarySpecs {
		for _, dt := range sp.types {
			pairs := []shapePair{{[]int{4, 6}, []int{4, 6}, dense, dense}}
			if dt == tensor.Float32 || dt == tensor.Int32 {
				pairs = append(pairs, shapePair{[]int{3, 5}, []int{5}, transposed, dense})
			}
			for _, p := range pairs {
				cs = append(cs, testCase{fmt.Sprintf("%s/%s/%s", sp.name, dt, p), func(c *checker) {
					ga, gb := sp.ga, sp.gb
					if !dt.IsFloat() && dt != tensor.Bool {
						ga, gb = intGen(dt, sp.name == "Mul"), intGen(dt, sp.name == "Mul")
						if dt == tensor.Uint8 && sp.name == "Add" {
							ga, gb = ints(0, 120), ints(0, 120)
						}
						if sp.out(dt) == tensor.Bool || sp.name == "Maximum" || sp.name == "Minimum" {
							// small ranges so that ties occur
							ga, gb = ints(-2, 2), ints(-2, 2)
							if !dt.IsSigned() {
								ga, gb = ints(0, 3), ints(0, 3)
							}
						}
						if sp.name == "Div" {
							gb = pick(-7, -3, -2, 1, 2, 5)
						}
					}
					if dt == tensor.Bool {
						ga, gb = pick(0, 1), pick(0, 1)
					}
					a, av := c.in(p.a, dt, ga, p.la)
					b, bv := c.in(p.b, dt, gb, p.lb)
					want, shape := binaryRef(sp, av, p.a, bv, p.b, dt)
					c.check(sp.name, c.T(sp.f(a, b)), shape, sp.out(dt), want, tolFor(sp.out(dt), sp.loose))
				}})
			}
		}
	}
	// Broadcasting and memory layouts on Add (and Mul for float16).
	layouts := []shapePair{
		{[]int{2, 3, 4}, []int{}, dense, dense},
		{[]int{}, []int{2, 3, 4}, dense, dense},
		{[]int{3, 4}, []int{4}, dense, dense},
		{[]int{3, 4}, []int{3, 1}, dense, dense},
		{[]int{2, 1, 4}, []int{2, 3, 4}, dense, dense},
		{[]int{2, 3, 1}, []int{1, 3, 5}, dense, dense},
		{[]int{1}, []int{5, 1}, dense, dense},
		{[]int{0, 4}, []int{4}, dense, dense},
		{[]int{3, 0}, []int{3, 1}, dense, dense},
		{[]int{1, 1, 1}, []int{1, 1, 1}, dense, dense},
		{[]int{5, 7}, []int{5, 7}, transposed, transposed},
		{[]int{5, 7}, []int{5, 7}, strided, dense},
		{[]int{5, 7}, []int{5, 7}, broadcast, transposed},
		{[]int{4, 3, 6}, []int{6}, strided, broadcast},
		{[]int{4, 33}, []int{4, 33}, transposed, strided},
		{[]int{3, 4, 5}, []int{3, 1, 5}, broadcast, broadcast},
		{[]int{64, 129}, []int{129}, dense, dense},
		{[]int{2, 64, 129}, []int{2, 64, 129}, transposed, dense},
	}
	add := binarySpecs[0]
	mul := binarySpecs[2]
	for _, p := range layouts {
		for _, sp := range []binarySpec{add, mul} {
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				if sp.name == "Mul" && dt == tensor.BFloat16 {
					continue
				}
				cs = append(cs, testCase{fmt.Sprintf("broadcast/%s/%s/%s", sp.name, dt, p), func(c *checker) {
					a, av := c.in(p.a, dt, smallFloat, p.la)
					b, bv := c.in(p.b, dt, smallFloat, p.lb)
					want, shape := binaryRef(sp, av, p.a, bv, p.b, dt)
					c.check(sp.name, c.T(sp.f(a, b)), shape, dt, want, tolFor(dt, false))
				}})
			}
		}
	}
	// sign rules of Remainder and FloorDivide
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64, tensor.Uint32} {
		cs = append(cs, testCase{"Remainder+FloorDivide/" + dt.String(), func(c *checker) {
			const n = 48
			av, bv := make([]float64, n), make([]float64, n)
			for i := range av {
				if dt.IsFloat() {
					// a = b·(q + f) with f away from 0 and 1, so ⌊a/b⌋ is robust to rounding
					b := roundTo(awayFromZero(0.5, 4)(c.rng), dt)
					q := float64(c.rng.IntN(9) - 4)
					f := 0.1 + 0.8*c.rng.Float64()
					av[i], bv[i] = roundTo(b*(q+f), dt), b
					if i < 4 {
						av[i] = roundTo(float64(i-2)*b, dt) // exact multiples: remainder 0
					}
				} else if dt == tensor.Uint32 {
					av[i], bv[i] = float64(c.rng.IntN(1000)), float64(1+c.rng.IntN(30))
				} else {
					av[i] = float64(c.rng.IntN(201) - 100)
					bv[i] = float64(c.rng.IntN(15) - 7)
					if bv[i] == 0 {
						bv[i] = 3
					}
				}
			}
			a := c.arr(av, []int{n}, dt)
			b := c.arr(bv, []int{n}, dt)
			rem, fd := make([]float64, n), make([]float64, n)
			for i := range av {
				if dt.IsFloat() {
					x, y := av[i], bv[i]
					fd[i] = math.Floor(x / y)
					rem[i] = pyMod(x, y)
				} else {
					rem[i] = float64(pyModInt(int64(av[i]), int64(bv[i])))
					fd[i] = float64(floorDivInt(int64(av[i]), int64(bv[i])))
				}
			}
			tl := tolFor(dt, false)
			if dt == tensor.Float32 {
				tl.atol = 2e-6 // a remainder near 0 carries the rounding of |a| ≤ 20
			}
			c.check("Remainder", c.T(tensor.Remainder(a, b)), []int{n}, dt, rem, tl)
			c.check("FloorDivide", c.T(tensor.FloorDivide(a, b)), []int{n}, dt, fd, tolFor(dt, false))
		}})
	}
	// NaN propagation of Maximum and Minimum
	for _, dt := range floatOnly {
		cs = append(cs, testCase{"Maximum+Minimum/NaN/" + dt.String(), func(c *checker) {
			nan := math.NaN()
			av := []float64{nan, 1, nan, -2, 3, math.Inf(-1)}
			bv := []float64{1, nan, nan, -3, math.Inf(1), 0}
			a := c.arr(av, []int{6}, dt)
			b := c.arr(bv, []int{6}, dt)
			mx, mn := make([]float64, 6), make([]float64, 6)
			for i := range av {
				mx[i], mn[i] = nanMax(av[i], bv[i]), nanMin(av[i], bv[i])
			}
			c.check("Maximum", c.T(tensor.Maximum(a, b)), []int{6}, dt, mx, tol{})
			c.check("Minimum", c.T(tensor.Minimum(a, b)), []int{6}, dt, mn, tol{})
			c.check("Equal NaN", c.T(tensor.Equal(a, b)), []int{6}, tensor.Bool, []float64{0, 0, 0, 0, 0, 0}, tol{})
			c.check("NotEqual NaN", c.T(tensor.NotEqual(a, b)), []int{6}, tensor.Bool, []float64{1, 1, 1, 1, 1, 1}, tol{})
		}})
	}
	// shifts
	for _, dt := range bitTypes {
		cs = append(cs, testCase{"LeftShift+RightShift/" + dt.String(), func(c *checker) {
			var ga gen
			switch dt {
			case tensor.Uint8:
				ga = ints(0, 255)
			case tensor.Uint32:
				ga = ints(0, 1<<31)
			default:
				ga = ints(-5000, 5000)
			}
			bits := dt.Size() * 8
			a, av := c.in([]int{3, 8}, dt, ga, dense)
			b, bv := c.in([]int{8}, dt, ints(0, min(bits-1, 20)), dense)
			l, r := make([]float64, 24), make([]float64, 24)
			for i := range l {
				x, s := int64(av[i]), uint(bv[i%8])
				l[i] = float64(wrapInt(x<<s, dt))
				r[i] = float64(x >> s) // arithmetic for signed types
			}
			c.check("LeftShift", c.T(tensor.LeftShift(a, b)), []int{3, 8}, dt, l, tol{})
			c.check("RightShift", c.T(tensor.RightShift(a, b)), []int{3, 8}, dt, r, tol{})
		}})
	}
	cs = append(cs,
		testCase{"promotion/int32+float32", func(c *checker) {
			a := c.arr([]float64{1, 2, 3}, []int{3}, tensor.Int32)
			b := c.arr([]float64{0.5, 0.25, -1}, []int{3}, tensor.Float32)
			c.check("Add", c.T(tensor.Add(a, b)), []int{3}, tensor.Float32, []float64{1.5, 2.25, 2}, tol{})
		}},
		testCase{"promotion/bfloat16+float16", func(c *checker) {
			a := c.arr([]float64{1, 2, 3}, []int{3}, tensor.BFloat16)
			b := c.arr([]float64{0.5, 0.25, -1}, []int{3}, tensor.Float16)
			c.check("Mul", c.T(tensor.Mul(a, b)), []int{3}, tensor.Float32, []float64{0.5, 0.5, -3}, tol{})
		}},
		testCase{"promotion/uint32+int32", func(c *checker) {
			a := c.arr([]float64{4000000000, 2}, []int{2}, tensor.Uint32)
			b := c.arr([]float64{-1, -5}, []int{2}, tensor.Int32)
			c.check("Add", c.T(tensor.Add(a, b)), []int{2}, tensor.Int64, []float64{3999999999, -3}, tol{})
		}},
	)
	return cs
}

// ---- scalar variants ----

type scalarSpec struct {
	name string
	f    func(*tensor.Array, float64) *tensor.Array
	ref  func(x, v float64) float64
}

var scalarSpecs = []scalarSpec{
	{"AddScalar", tensor.AddScalar, func(x, v float64) float64 { return x + v }},
	{"SubScalar", tensor.SubScalar, func(x, v float64) float64 { return x - v }},
	{"MulScalar", tensor.MulScalar, func(x, v float64) float64 { return x * v }},
	{"DivScalar", tensor.DivScalar, func(x, v float64) float64 { return x / v }},
	{"PowScalar", tensor.PowScalar, math.Pow},
	{"MaximumScalar", tensor.MaximumScalar, math.Max},
	{"MinimumScalar", tensor.MinimumScalar, math.Min},
}

func scalarCases() []testCase {
	var cs []testCase
	for _, sp := range scalarSpecs {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32} {
			for _, v := range []float64{2, 0.5} {
				cs = append(cs, testCase{fmt.Sprintf("%s/%s/%g", sp.name, dt, v), func(c *checker) {
					g := uni(0.1, 4)
					if dt == tensor.Int32 {
						g = ints(1, 9)
					}
					a, av := c.in([]int{3, 5}, dt, g, transposed)
					out := dt
					if !dt.IsFloat() && (v != math.Trunc(v) || sp.name == "DivScalar" || sp.name == "PowScalar") {
						out = tensor.Float32
					}
					// the scalar is held in the result's dtype
					sv := roundTo(v, out)
					want := make([]float64, len(av))
					for i, x := range av {
						want[i] = sp.ref(x, sv)
					}
					c.check(sp.name, c.T(sp.f(a, v)), []int{3, 5}, out, want, tolFor(out, sp.name == "PowScalar"))
				}})
			}
		}
	}
	return cs
}

// ---- where ----

func whereCases() []testCase {
	var cs []testCase
	type wshape struct{ c, a, b []int }
	shapes := []wshape{
		{[]int{3, 4}, []int{3, 4}, []int{3, 4}},
		{[]int{3, 1}, []int{4}, []int{3, 4}},
		{[]int{4}, []int{3, 4}, []int{}},
		{[]int{2, 1, 4}, []int{1, 3, 1}, []int{2, 3, 4}},
		{[]int{0, 4}, []int{4}, []int{4}},
	}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Bool} {
		for si, s := range shapes {
			cs = append(cs, testCase{fmt.Sprintf("Where/%s/%v,%v,%v", dt, s.c, s.a, s.b), func(c *checker) {
				g := smallFloat
				if dt == tensor.Int32 {
					g = ints(-100, 100)
				} else if dt == tensor.Bool {
					g = pick(0, 1)
				}
				lay := dense
				if si == 0 {
					lay = transposed
				}
				cond, cv := c.in(s.c, tensor.Bool, pick(0, 1), lay)
				a, av := c.in(s.a, dt, g, lay)
				b, bv := c.in(s.b, dt, g, dense)
				shape := broadcastShape(broadcastShape(s.c, s.a), s.b)
				want := make([]float64, numel(shape))
				for i := range want {
					idx := unravel(i, shape)
					if cv[bcastIndex(idx, s.c)] != 0 {
						want[i] = av[bcastIndex(idx, s.a)]
					} else {
						want[i] = bv[bcastIndex(idx, s.b)]
					}
				}
				c.check("Where", c.T(tensor.Where(cond, a, b)), shape, dt, want, tol{})
			}})
		}
	}
	cs = append(cs,
		testCase{"Where/float-cond", func(c *checker) {
			cond := c.arr([]float64{0, 2, -1, 0}, []int{4}, tensor.Float32)
			a := c.arr([]float64{1, 2, 3, 4}, []int{4}, tensor.Float32)
			b := c.arr([]float64{-1, -2, -3, -4}, []int{4}, tensor.Float32)
			c.check("Where", c.T(tensor.Where(cond, a, b)), []int{4}, tensor.Float32, []float64{-1, 2, 3, -4}, tol{})
		}},
		testCase{"WhereScalar", func(c *checker) {
			cond, cv := c.in([]int{4, 5}, tensor.Bool, pick(0, 1), dense)
			a, av := c.in([]int{4, 5}, tensor.BFloat16, smallFloat, transposed)
			want := make([]float64, 20)
			for i := range want {
				want[i] = math.Inf(-1)
				if cv[i] != 0 {
					want[i] = av[i]
				}
			}
			c.check("WhereScalar", c.T(tensor.WhereScalar(cond, a, math.Inf(-1))), []int{4, 5}, tensor.BFloat16, want, tol{})
		}},
	)
	return cs
}

// ---- AsType ----

func asTypeCases() []testCase {
	var cs []testCase
	for _, src := range allTypes {
		for _, dst := range allTypes {
			cs = append(cs, testCase{fmt.Sprintf("%s→%s", src, dst), func(c *checker) {
				// values both types can hold (negative only where both are signed)
				signed := src.IsSigned() && dst.IsSigned()
				var g gen
				switch {
				case src == tensor.Bool:
					g = pick(0, 1)
				case src.IsFloat() && signed:
					g = pick(-2.75, -1, -0.5, 0, 0.4, 1, 2.5, 3.999, 100.25, -77.5, 1.0/3)
				case src.IsFloat():
					g = pick(0, 0.4, 1, 2.5, 3.999, 100.25, 200.5, 1.0/3)
				case signed:
					g = ints(-200, 200)
				default:
					g = ints(0, 255)
				}
				if dst == tensor.Bool && src.IsFloat() {
					g = pick(0, -0.0, 0.25, -3, 1)
				}
				lay := dense
				if src == tensor.Float32 || dst == tensor.Float32 {
					lay = transposed
				}
				a, av := c.in([]int{3, 7}, src, g, lay)
				want := make([]float64, len(av))
				for i, x := range av {
					switch {
					case dst == tensor.Bool:
						want[i] = boolOf(x != 0)
					case dst.IsFloat():
						want[i] = roundTo(x, dst)
					default:
						want[i] = float64(wrapInt(int64(math.Trunc(x)), dst))
					}
				}
				c.check("AsType", c.T(tensor.AsType(a, dst)), []int{3, 7}, dst, want, tol{})
			}})
		}
	}
	cs = append(cs,
		testCase{"float32→bfloat16/round-to-even", func(c *checker) {
			// 1 + 2^-8 is halfway between two bfloat16s: ties go to even (1).
			in := []float64{1 + 1.0/256, 1 + 3.0/256, -(1 + 1.0/256), 1 + 1.0/256 + 1.0/65536, 1e-40, 3.4e38}
			a := c.arr(in, []int{len(in)}, tensor.Float32)
			want := make([]float64, len(in))
			for i, x := range in {
				want[i] = roundTo(x, tensor.BFloat16)
			}
			c.check("AsType", c.T(tensor.AsType(a, tensor.BFloat16)), []int{len(in)}, tensor.BFloat16, want, tol{})
		}},
		testCase{"float32→float16/overflow+subnormal", func(c *checker) {
			in := []float64{70000, -70000, 6e-8, 1e-5, 65504, math.NaN()}
			a := c.arr(in, []int{len(in)}, tensor.Float32)
			want := make([]float64, len(in))
			for i, x := range in {
				want[i] = roundTo(x, tensor.Float16)
			}
			c.check("AsType", c.T(tensor.AsType(a, tensor.Float16)), []int{len(in)}, tensor.Float16, want, tol{})
		}},
		testCase{"int64→int32/wrap-free-range", func(c *checker) {
			in := []float64{math.MaxInt32, math.MinInt32, 0, -1}
			a := c.arr(in, []int{4}, tensor.Int64)
			c.check("AsType", c.T(tensor.AsType(a, tensor.Int32)), []int{4}, tensor.Int32, in, tol{})
			u := c.arr([]float64{4294967295, 0}, []int{2}, tensor.Uint32)
			c.check("AsType", c.T(tensor.AsType(u, tensor.Int64)), []int{2}, tensor.Int64, []float64{4294967295, 0}, tol{})
		}},
	)
	return cs
}
