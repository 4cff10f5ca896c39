package cpu

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// goldenCase is one entry of tensor/testdata/quant_golden.json, written by
// tools/oracle/quant_golden (real MLX v0.31.2 on its CPU stream). Arrays are
// hex-encoded little-endian element bytes.
type goldenCase struct {
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
	DType     string `json:"dtype"`
	Rows      int    `json:"rows"`
	Cols      int    `json:"cols"`
	XRows     int    `json:"x_rows"`
	W         string `json:"w"`
	WQ        string `json:"wq"`
	Scales    string `json:"scales"`
	Biases    string `json:"biases"`
	Dequant   string `json:"dequant"`
	X         string `json:"x"`
	YT        string `json:"y_t"`
	XN        string `json:"x_n"`
	YN        string `json:"y_n"`
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	raw, err := os.ReadFile("../testdata/quant_golden.json")
	if err != nil {
		t.Fatalf("golden vectors: %v (regenerate with tools/oracle/quant_golden/run.sh)", err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 36 {
		t.Fatalf("only %d golden cases", len(g.Cases))
	}
	return g.Cases
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forEachKernel runs f with the assembly kernels on and, where they exist,
// off (on an AVX-512 machine also without its AVX-512 quantized matmul,
// reaching the AVX512_BF16 matvec, then without AVX512_BF16, reaching the
// older quantized kernels, and with its AVX2 kernels alone), so every
// path is held to the same reference.
func forEachKernel(t *testing.T, f func(t *testing.T)) {
	t.Run("simd", f)
	if hasAVX512 && qmvzOn {
		t.Run("noqmvz", func(t *testing.T) {
			qmvzOn = false
			defer func() { qmvzOn = true }()
			f(t)
		})
	}
	if hasBF16 {
		t.Run("nobf16", func(t *testing.T) {
			hasBF16, qmvzOn = false, false
			defer func() { hasBF16, qmvzOn = true, true }()
			f(t)
		})
	}
	if hasAVX512 && hasAVX2 {
		t.Run("avx2", func(t *testing.T) {
			hasAVX512 = false
			defer func() { hasAVX512 = true }()
			f(t)
		})
	}
	if hasAVX512 || hasAVX2 {
		t.Run("portable", func(t *testing.T) {
			a512, a2 := hasAVX512, hasAVX2
			hasAVX512, hasAVX2 = false, false
			defer func() { hasAVX512, hasAVX2 = a512, a2 }()
			f(t)
		})
	}
}

func TestQuantGoldenMLX(t *testing.T) {
	cases := loadGolden(t)
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		for _, c := range cases {
			name := fmt.Sprintf("%s/b%d/g%d", c.DType, c.Bits, c.GroupSize)
			checkGoldenCase(t, name, c)
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

func checkGoldenCase(t *testing.T, name string, c goldenCase) {
	be := Default
	dt, err := tensor.ParseDType(c.DType)
	if err != nil {
		t.Fatal(err)
	}
	w := tensor.FromBytesOn(be, unhex(t, c.W), []int{c.Rows, c.Cols}, dt, false)
	defer w.Free()
	wq, sc, bi := tensor.Quantize(w, c.GroupSize, c.Bits)
	defer tensor.Free(wq, sc, bi)

	if got, want := wq.Bytes(), unhex(t, c.WQ); !bytes.Equal(got, want) {
		t.Errorf("%s: packed words differ from MLX at byte %d", name, firstDiff(got, want))
	}
	if got, want := sc.Bytes(), unhex(t, c.Scales); !bytes.Equal(got, want) {
		t.Errorf("%s: scales differ from MLX at byte %d", name, firstDiff(got, want))
	}
	if got, want := bi.Bytes(), unhex(t, c.Biases); !bytes.Equal(got, want) {
		t.Errorf("%s: biases differ from MLX at byte %d", name, firstDiff(got, want))
	}

	// dequantize MLX's own packed weights, so a quantize bug cannot hide here
	mwq := tensor.FromBytesOn(be, unhex(t, c.WQ), []int{c.Rows, c.Cols * c.Bits / 32}, tensor.Uint32, false)
	msc := tensor.FromBytesOn(be, unhex(t, c.Scales), []int{c.Rows, c.Cols / c.GroupSize}, dt, false)
	mbi := tensor.FromBytesOn(be, unhex(t, c.Biases), []int{c.Rows, c.Cols / c.GroupSize}, dt, false)
	defer tensor.Free(mwq, msc, mbi)
	dq := tensor.Dequantize(mwq, msc, mbi, c.GroupSize, c.Bits, tensor.Invalid)
	defer dq.Free()
	if got, want := dq.Bytes(), unhex(t, c.Dequant); !bytes.Equal(got, want) {
		t.Errorf("%s: dequantized values differ from MLX at byte %d", name, firstDiff(got, want))
	}

	// quantized matmul: compare with the exact product of the unrounded
	// dequantized weight (q·scale + bias in float64). MLX accumulates in the
	// input dtype and rounds each dequantized value to it, so its own output
	// only gets a looser check.
	codes := make([]uint8, c.Cols)
	sv, bv := msc.Float32s(), mbi.Float32s()
	words := u32s(unhex(t, c.WQ))
	ng := c.Cols / c.GroupSize
	deq := make([]float64, c.Rows*c.Cols)
	for r := range c.Rows {
		unpackCodes(codes, words[r*c.Cols*c.Bits/32:], c.Bits)
		for k := range c.Cols {
			g := r*ng + k/c.GroupSize
			deq[r*c.Cols+k] = float64(codes[k])*float64(sv[g]) + float64(bv[g])
		}
	}
	x := tensor.FromBytesOn(be, unhex(t, c.X), []int{c.XRows, c.Cols}, dt, false)
	defer x.Free()
	yt := tensor.QuantizedMatmul(x, mwq, msc, mbi, true, c.GroupSize, c.Bits)
	defer yt.Free()
	mlxYT := tensor.FromBytesOn(be, unhex(t, c.YT), []int{c.XRows, c.Rows}, dt, false)
	defer mlxYT.Free()
	xv := x.Float32s()
	refT := make([]float64, c.XRows*c.Rows)
	for m := range c.XRows {
		for n := range c.Rows {
			var s float64
			for k := range c.Cols {
				s += float64(xv[m*c.Cols+k]) * float64(deq[n*c.Cols+k])
			}
			refT[m*c.Rows+n] = s
		}
	}
	checkClose(t, name+"/qmm_t", yt.Float32s(), refT, dt, false)
	checkClose(t, name+"/qmm_t vs mlx", mlxYT.Float32s(), refT, dt, true)

	xn := tensor.FromBytesOn(be, unhex(t, c.XN), []int{c.XRows, c.Rows}, dt, false)
	defer xn.Free()
	yn := tensor.QuantizedMatmul(xn, mwq, msc, mbi, false, c.GroupSize, c.Bits)
	defer yn.Free()
	xnv := xn.Float32s()
	refN := make([]float64, c.XRows*c.Cols)
	for m := range c.XRows {
		for j := range c.Cols {
			var s float64
			for k := range c.Rows {
				s += float64(xnv[m*c.Rows+k]) * float64(deq[k*c.Cols+j])
			}
			refN[m*c.Cols+j] = s
		}
	}
	checkClose(t, name+"/qmm_n", yn.Float32s(), refN, dt, false)
	mlxYN := tensor.FromBytesOn(be, unhex(t, c.YN), []int{c.XRows, c.Cols}, dt, false)
	defer mlxYN.Free()
	checkClose(t, name+"/qmm_n vs mlx", mlxYN.Float32s(), refN, dt, true)
}

// checkClose compares against a float64 reference with a tolerance fitting
// dt's precision, relative to the largest reference magnitude (outlier
// groups make individual entries cancel); loose allows for accumulating in dt.
func checkClose(t *testing.T, name string, got []float32, ref []float64, dt tensor.DType, loose bool) {
	t.Helper()
	if len(got) != len(ref) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(ref))
	}
	scale := 0.0
	for _, r := range ref {
		scale = max(scale, math.Abs(r))
	}
	tol := 1e-5
	switch dt {
	case tensor.BFloat16:
		tol = 8e-3 // output rounding: half an ulp is 2^-9 relative
		if loose {
			tol = 6e-2
		}
	case tensor.Float16:
		tol = 1e-3
		if loose {
			tol = 1e-2
		}
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - ref[i]); d > tol*max(scale, 1) || math.IsNaN(float64(got[i])) {
			t.Errorf("%s[%d] = %g, want %g", name, i, got[i], ref[i])
			return
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
