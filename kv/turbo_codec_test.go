package kv

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

type turboGoldenCase struct {
	Kind    string   `json:"kind"`
	D       int      `json:"d"`
	Bits    int      `json:"bits"`
	Input   int      `json:"input"`
	X       string   `json:"x"`
	Codes   []int32  `json:"codes"`
	Scales  []uint16 `json:"scales"`
	Biases  []uint16 `json:"biases"`
	Packed  string   `json:"packed"`
	Decoded string   `json:"decoded"`
}

func hexFloats(t *testing.T, s string) []float32 {
	t.Helper()
	raw, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
	}
	return out
}

// TestTurboCodecGolden: codes, scales, biases, packed bytes and decoded
// values equal the float64 reference's (tools/oracle/turboquant) bit for
// bit, for every key and value width at every head dim.
func TestTurboCodecGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/turboquant_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Cases []turboGoldenCase }
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	seen := map[[3]int]bool{}
	var s turboScratch
	for _, c := range g.Cases {
		x := hexFloats(t, c.X)
		want, _ := hex.DecodeString(c.Packed)
		dec := make([]float32, c.D)
		var got []byte
		spec := TurboSpec{KeyBits: c.Bits, ValueBits: c.Bits}
		kind := 0
		if c.Kind == "key" {
			got = make([]byte, spec.KeyBytes(c.D))
			encodeKey(got, x, c.Bits, &s)
			decodeKey(dec, got, c.Bits)
		} else {
			kind = 1
			got = make([]byte, spec.ValueBytes(c.D))
			encodeValue(got, x, c.Bits, &s)
			decodeValue(dec, got, c.Bits, &s)
		}
		seen[[3]int{kind, c.D, c.Bits}] = true
		name := func() string { return c.Kind + " d=" + itoa(c.D) + " bits=" + itoa(c.Bits) + " input " + itoa(c.Input) }
		// codes and scales, read back from the packed bytes
		for j, w := range c.Codes {
			q := int32(unpackCode(got, j, c.Bits))
			if c.Kind == "key" && c.Bits == 8 {
				q = int32(int8(got[j]))
			}
			if q != w {
				t.Fatalf("%s: code %d = %d, reference %d", name(), j, q, w)
			}
		}
		meta := got[c.D*c.Bits/8:]
		for gi, w := range c.Scales {
			stride := 2
			if c.Kind == "key" {
				stride = 4
			}
			if s := uint16(meta[gi*stride]) | uint16(meta[gi*stride+1])<<8; s != w {
				t.Fatalf("%s: group %d scale %#04x, reference %#04x", name(), gi, s, w)
			}
		}
		for gi, w := range c.Biases {
			if b := uint16(meta[gi*4+2]) | uint16(meta[gi*4+3])<<8; b != w {
				t.Fatalf("%s: group %d bias %#04x, reference %#04x", name(), gi, b, w)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: packed bytes differ from the reference's", name())
		}
		wd := hexFloats(t, c.Decoded)
		for i := range wd {
			if math.Float32bits(dec[i]) != math.Float32bits(wd[i]) {
				t.Fatalf("%s: decoded[%d] = %v, reference %v", name(), i, dec[i], wd[i])
			}
		}
	}
	for _, d := range TurboHeadDims {
		for _, b := range TurboKeyBits {
			if !seen[[3]int{0, d, b}] {
				t.Errorf("golden has no key case for d=%d, %d bits", d, b)
			}
		}
		for _, b := range TurboValueBits {
			if !seen[[3]int{1, d, b}] {
				t.Errorf("golden has no value case for d=%d, %d bits", d, b)
			}
		}
	}
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// TestTurboFWHTInvolution: the normalised transform applied twice gives
// the input back (exactly on small integers, where float64 sums are exact,
// and to rounding on random floats), and the full value rotation is
// inverted by unrotate.
func TestTurboFWHTInvolution(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range TurboHeadDims {
		x := make([]float64, d)
		for i := range x {
			x[i] = float64(r.IntN(2001) - 1000)
		}
		y := slices.Clone(x)
		fwht(y)
		fwht(y)
		for i := range y {
			if y[i] != float64(d)*x[i] {
				t.Fatalf("d=%d: H(H(x))[%d] = %v, want %v", d, i, y[i], float64(d)*x[i])
			}
		}
		for i := range x {
			x[i] = r.NormFloat64()
		}
		y = slices.Clone(x)
		for i := range y {
			y[i] *= turboSigns[i]
		}
		fwht(y)
		for i := range y {
			y[i] /= math.Sqrt(float64(d))
		}
		unrotate(y)
		for i := range y {
			if math.Abs(y[i]-x[i]) > 1e-12*(1+math.Abs(x[i])) {
				t.Fatalf("d=%d: unrotate(rotate(x))[%d] = %v, want %v", d, i, y[i], x[i])
			}
		}
	}
}

// TestTurboValueMSE: on random unit vectors, the values' per-coordinate
// squared error (scaled by d, the inverse variance of a coordinate) is at
// most 5% above the Lloyd–Max distortion of each width. It comes out
// about 5% below it: a group divided by its own RMS lies on the sphere of
// radius √32, whose coordinates have lighter tails than a Gaussian (density
// ∝ (1-u²/32)^14.5), and the test also holds the error to within 2% of the
// codebook's distortion under that exact density.
func TestTurboValueMSE(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s turboScratch
	for _, b := range TurboValueBits {
		exact := sphereDistortion(turboBooks[b])
		for _, d := range TurboHeadDims {
			n := 40000 / d * 8
			sum := 0.0
			v := make([]float32, d)
			dec := make([]float32, d)
			buf := make([]byte, TurboSpec{ValueBits: b}.ValueBytes(d))
			x := make([]float64, d)
			for range n {
				norm := 0.0
				for i := range x {
					x[i] = r.NormFloat64()
					norm += x[i] * x[i]
				}
				for i := range x {
					v[i] = float32(x[i] / math.Sqrt(norm))
				}
				encodeValue(buf, v, b, &s)
				decodeValue(dec, buf, b, &s)
				for i := range v {
					e := float64(dec[i]) - float64(v[i])
					sum += e * e
				}
			}
			mse := sum / float64(n)
			lm := turboDistortion[b]
			t.Logf("d=%d %d bits: d·MSE %.6g, Lloyd–Max %.6g (%+.2f%%), on the sphere %.6g (%+.2f%%)",
				d, b, mse, lm, 100*(mse/lm-1), exact, 100*(mse/exact-1))
			if mse > 1.05*lm {
				t.Errorf("d=%d %d bits: per-coordinate MSE×d %.6g is more than 5%% above the Lloyd–Max distortion %.6g", d, b, mse, lm)
			}
			if math.Abs(mse/exact-1) > 0.02 {
				t.Errorf("d=%d %d bits: per-coordinate MSE×d %.6g, expected %.6g for RMS-normalised groups", d, b, mse, exact)
			}
		}
	}
}

// sphereDistortion is E[(u-Q(u))²] for u a coordinate of a uniform point
// on the sphere of radius √32 in 32 dimensions, by Simpson's rule.
func sphereDistortion(bk *turboBook) float64 {
	const n = 200000
	a := math.Sqrt(TurboGroup)
	h := 2 * a / n
	var num, den float64
	for i := 0; i <= n; i++ {
		u := -a + float64(i)*h
		w := 2.0
		if i == 0 || i == n {
			w = 1
		} else if i%2 == 1 {
			w = 4
		}
		f := math.Pow(max(0, 1-u*u/TurboGroup), (TurboGroup-3)/2.0)
		e := u - bk.levels[searchBelow(bk.thresholds, u)]
		num += w * f * e * e
		den += w * f
	}
	return num / den
}

// TestTurboQJLUnbiased: with the QJL residual sketch, inner products of a
// query with decoded keys are unbiased (the least-squares slope of the
// estimate on the truth is 1, within 4%: S is one fixed draw, so the
// expectation holds only up to O(1/√d) for a given S), while the first
// stage alone — the same codes without the sketch — shrinks them. The
// sketch pays for that with variance: the log shows both mean squared
// errors (the sketch's is larger at every width here).
func TestTurboQJLUnbiased(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var s turboScratch
	for _, b := range TurboQJLKeyBits {
		for _, d := range []int{64, 128} {
			spec := TurboSpec{KeyBits: b, ValueBits: 3, QJL: true}
			buf := make([]byte, spec.KeyBytes(d))
			q := make([]float64, d)
			for i := range q {
				q[i] = r.NormFloat64()
			}
			k := make([]float32, d)
			dec := make([]float32, d)
			first := make([]float64, d)
			var sxy, sxx, sfy, eq, ef float64
			for range 3000 {
				for i := range k {
					k[i] = float32(r.NormFloat64())
				}
				encodeKeyQJL(buf, k, b, &s)
				decodeKeyQJL(dec, buf, b, &s)
				decodeValueRotated(first, nil, buf, d, b-1)
				unrotate(first)
				var truth, est, fst float64
				for i := range d {
					truth += q[i] * float64(k[i])
					est += q[i] * float64(dec[i])
					fst += q[i] * first[i]
				}
				sxy += truth * est
				sfy += truth * fst
				sxx += truth * truth
				eq += (est - truth) * (est - truth)
				ef += (fst - truth) * (fst - truth)
			}
			slope, fslope := sxy/sxx, sfy/sxx
			t.Logf("k%d d=%d: slope with sketch %.4f, first stage alone %.4f; MSE %.4g vs %.4g", b, d, slope, fslope, eq, ef)
			if math.Abs(slope-1) > 0.04 {
				t.Errorf("k%d d=%d: slope %.4f of decoded inner products, want 1", b, d, slope)
			}
			if fslope > 1-turboDistortion[b-1]/2 {
				t.Errorf("k%d d=%d: first stage alone has slope %.4f: expected shrinkage", b, d, fslope)
			}
		}
	}
}
