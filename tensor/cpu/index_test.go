package cpu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestTakeRows(t *testing.T) {
	fzNoLeak(t, func() {
		v, d := 7, 5
		tab := fzRound(fzRand(v*d, 1), tensor.BFloat16)
		table := tensor.FromFloat32(tab, []int{v, d}, tensor.BFloat16)
		ids := tensor.FromInt32([]int32{2, -1, 0, 6, 2, 3}, []int{2, 3})
		got := tensor.Take(table, ids, 0)
		if !slices.Equal(got.Shape(), []int{2, 3, d}) || got.DType() != tensor.BFloat16 {
			t.Fatalf("shape %v %s", got.Shape(), got.DType())
		}
		g := got.Float32s()
		for k, id := range []int{2, 6, 0, 6, 2, 3} {
			if !slices.Equal(g[k*d:(k+1)*d], tab[id*d:(id+1)*d]) {
				t.Errorf("row %d: %v, want row %d %v", k, g[k*d:(k+1)*d], id, tab[id*d:(id+1)*d])
			}
		}
		tensor.Free(table, ids, got)
	})
}

func TestTakeAxesAndIndexTypes(t *testing.T) {
	fzNoLeak(t, func() {
		vals := fzRand(2*4*3, 2)
		a := tensor.FromFloat32(vals, []int{2, 4, 3}, tensor.Float32)
		at := func(i, j, k int) float32 { return vals[(i*4+j)*3+k] }
		for _, dt := range []tensor.DType{tensor.Int32, tensor.Int64, tensor.Uint32, tensor.Uint8} {
			idx := tensor.FromInts([]int{3, 1, 1}, []int{3}, dt)
			got := tensor.Take(a, idx, 1)
			if !slices.Equal(got.Shape(), []int{2, 3, 3}) {
				t.Fatalf("%s: shape %v", dt, got.Shape())
			}
			g := got.Float32s()
			for i := range 2 {
				for n, j := range []int{3, 1, 1} {
					for k := range 3 {
						if g[(i*3+n)*3+k] != at(i, j, k) {
							t.Fatalf("%s: out[%d,%d,%d] = %v, want %v", dt, i, n, k, g[(i*3+n)*3+k], at(i, j, k))
						}
					}
				}
			}
			tensor.Free(idx, got)
		}
		// last axis of a transposed (strided) view, with a scalar index
		tr := tensor.Transpose(a, 2, 0, 1) // [3, 2, 4]: tr[k,i,j] = a[i,j,k]
		idx := tensor.FromInt32([]int32{-2}, []int{})
		got := tensor.Take(tr, idx, 2) // [3, 2]: a[i, 2, k]
		if !slices.Equal(got.Shape(), []int{3, 2}) {
			t.Fatalf("shape %v", got.Shape())
		}
		g := got.Float32s()
		for k := range 3 {
			for i := range 2 {
				if g[k*2+i] != at(i, 2, k) {
					t.Errorf("strided take [%d,%d] = %v, want %v", k, i, g[k*2+i], at(i, 2, k))
				}
			}
		}
		tensor.Free(a, tr, idx, got)
	})
}

func TestTakeOutOfRange(t *testing.T) {
	a := tensor.FromFloat32(fzRand(6, 3), []int{3, 2}, tensor.Float32)
	defer a.Free()
	for _, bad := range []int32{3, -4, 100} {
		idx := tensor.FromInt32([]int32{0, bad}, []int{2})
		before := tensor.LiveArrays()
		e := fzPanicErr(t, func() { tensor.Take(a, idx, 0) })
		if !errors.Is(e, tensor.ErrArgument) || !strings.Contains(e.Error(), "index "+itoa(int(bad))) {
			t.Errorf("index %d: error %v", bad, e)
		}
		if d := tensor.LiveArrays() - before; d != 0 {
			t.Errorf("failed Take leaked %d arrays", d)
		}
		idx.Free()
	}
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestTakeAlongAxis(t *testing.T) {
	fzNoLeak(t, func() {
		vals := fzRand(12, 4)
		a := tensor.FromFloat32(vals, []int{3, 4}, tensor.Float32)
		// per-row indices along the last axis (top-k style gather)
		idx := tensor.FromInt32([]int32{3, 0, 1, 1, -1, 2}, []int{3, 2})
		got := tensor.TakeAlongAxis(a, idx, 1)
		want := []float32{vals[3], vals[0], vals[5], vals[5], vals[11], vals[10]}
		if g := got.Float32s(); !slices.Equal(g, want) || !slices.Equal(got.Shape(), []int{3, 2}) {
			t.Errorf("axis 1: %v %v, want %v", got.Shape(), g, want)
		}
		// indices broadcast across rows
		idx2 := tensor.FromInt32([]int32{2, 0}, []int{1, 2})
		got2 := tensor.TakeAlongAxis(a, idx2, 1)
		want2 := []float32{vals[2], vals[0], vals[6], vals[4], vals[10], vals[8]}
		if g := got2.Float32s(); !slices.Equal(g, want2) || !slices.Equal(got2.Shape(), []int{3, 2}) {
			t.Errorf("broadcast: %v %v, want %v", got2.Shape(), g, want2)
		}
		// axis 0, with a broadcasting against indices
		col := tensor.FromFloat32([]float32{10, 20, 30}, []int{3, 1}, tensor.Float32)
		idx3 := tensor.FromInt32([]int32{2, 0, 1, 1}, []int{1, 4})
		got3 := tensor.TakeAlongAxis(col, idx3, 0)
		if g := got3.Float32s(); !slices.Equal(g, []float32{30, 10, 20, 20}) || !slices.Equal(got3.Shape(), []int{1, 4}) {
			t.Errorf("axis 0: %v %v", got3.Shape(), g)
		}
		e := fzPanicErr(t, func() {
			bad := tensor.FromInt32([]int32{4}, []int{1, 1})
			defer bad.Free()
			tensor.TakeAlongAxis(a, bad, 1)
		})
		if !errors.Is(e, tensor.ErrArgument) {
			t.Errorf("out of range: %v", e)
		}
		tensor.Free(a, idx, got, idx2, got2, col, idx3, got3)
	})
}

func TestPutAlongAxis(t *testing.T) {
	fzNoLeak(t, func() {
		vals := fzRand(12, 5)
		a := tensor.FromFloat32(vals, []int{3, 4}, tensor.Float32)
		idx := tensor.FromInt32([]int32{1, 3, -1, 0, 0, 0}, []int{3, 2})
		v := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, []int{3, 2}, tensor.Float32)
		got := tensor.PutAlongAxis(a, idx, v, 1)
		want := slices.Clone(vals)
		want[1], want[3] = 1, 2
		want[7], want[4] = 3, 4
		want[8] = 6 // duplicates: the later write wins
		if g := got.Float32s(); !slices.Equal(g, want) {
			t.Errorf("put: %v, want %v", g, want)
		}
		if g := a.Float32s(); !slices.Equal(g, vals) {
			t.Errorf("input modified: %v", g)
		}
		// axis 0 on bf16, values given as a broadcast view
		b := tensor.FromFloat32([]float32{0, 0, 0, 0, 0, 0}, []int{2, 3}, tensor.BFloat16)
		idx0 := tensor.FromInts([]int{1, 0, 1}, []int{1, 3}, tensor.Int64)
		s1 := tensor.FromFloat32([]float32{7}, []int{1, 1}, tensor.BFloat16)
		s := tensor.BroadcastTo(s1, 1, 3)
		got0 := tensor.PutAlongAxis(b, idx0, s, 0)
		if g := got0.Float32s(); !slices.Equal(g, []float32{0, 7, 0, 7, 0, 7}) {
			t.Errorf("axis 0: %v", g)
		}
		tensor.Free(a, idx, v, got, b, idx0, s1, s, got0)
	})
}
