package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// Token-level invariance: a row's result must not depend on how many rows
// the call holds, nor on the worker count. Each check computes a product
// over M rows in one call under several GOMAXPROCS values, and row by row
// in one-row calls, and compares the raw bytes.

// invProcs are the worker counts every invariance check runs under (more
// than the machine's cores is fine: it changes how work is split).
var invProcs = []int{1, 2, 5}

// withProcs runs f with GOMAXPROCS set to p.
func withProcs(p int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
	f()
}

// checkRowInvariant compares whole() (rows of rowBytes bytes, m of them),
// computed under each of invProcs, with one(i), row i computed alone.
func checkRowInvariant(t *testing.T, name string, m int, whole func() *tensor.Array, one func(i int) *tensor.Array) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	var ref []byte
	for _, p := range invProcs {
		var got []byte
		withProcs(p, func() { got = whole().Bytes() })
		if ref == nil {
			ref = got
			continue
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("%s: result with GOMAXPROCS=%d differs from GOMAXPROCS=%d", name, p, invProcs[0])
		}
	}
	rb := len(ref) / m
	for i := range m {
		got := one(i).Bytes()
		if !bytes.Equal(got, ref[i*rb:(i+1)*rb]) {
			t.Fatalf("%s: row %d of %d differs from the row computed alone", name, i, m)
		}
	}
}

// rowOf returns rows [i, i+1) of x along axis (a dense copy).
func rowOf(x *tensor.Array, axis, i int) *tensor.Array {
	return tensor.Contiguous(tensor.SliceAxis(x, axis, i, i+1))
}

var invDTypes = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16}

// TestMatmulRowInvariant: dense products x·Wᵀ (W stored [N, K], the
// Linear layout) and x·B (B stored [K, N]) give every row of x the same
// bits whether it is multiplied alone or among M rows.
func TestMatmulRowInvariant(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(7, 8))
		shapes := [][2]int{{77, 45}, {300, 70}, {513, 33}, {64, 96}, {16, 17}, {1030, 40}}
		ms := []int{1, 2, 3, 7, 8, 9, 17, 33, 40, 65, 130}
		for _, dt := range invDTypes {
			for si, sh := range shapes {
				k, n := sh[0], sh[1]
				for _, bT := range []bool{true, false} {
					m := ms[(si*3+len(dt.String()))%len(ms)]
					for _, mm := range []int{m, 40, 70} {
						name := fmt.Sprintf("%s/M%d_K%d_N%d/bT=%v", dt, mm, k, n, bT)
						s := tensor.NewScope()
						x := tensor.FromFloat32(randF32(r, mm*k), []int{mm, k}, dt)
						var w *tensor.Array
						if bT {
							w = tensor.Transpose(tensor.FromFloat32(randF32(r, n*k), []int{n, k}, dt))
						} else {
							w = tensor.FromFloat32(randF32(r, k*n), []int{k, n}, dt)
						}
						checkRowInvariant(t, name, mm,
							func() *tensor.Array { return tensor.Matmul(x, w) },
							func(i int) *tensor.Array { return tensor.Matmul(rowOf(x, 0, i), w) })
						s.Close()
					}
				}
			}
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}
