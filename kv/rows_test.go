package kv

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// rowCaches makes one cache of each kind, prefilled to different lengths
// from r, twice: a for the batched pass, b for the rows alone.
func rowCaches(t *testing.T, r *rand.Rand, hkv, d int) (a, b []Cache) {
	t.Helper()
	mk := []func() Cache{
		func() Cache { return NewKVCache() },
		func() Cache { return NewRotatingKVCache(24, 0) },
		func() Cache {
			q, err := NewQuantizedKVCache(32, 4)
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		func() Cache { return NewKVCache() },
	}
	for i, f := range mk {
		ca, cb := f(), f()
		s := newSeq(1, 1, hkv, d, d)
		for _, n := range []int{3 + 7*i, 1, 2} {
			k, v, q, _ := s.chunk(r, n)
			for _, c := range []Cache{ca, cb} {
				m := c.MakeMask(n, 0, false)
				c.UpdateAndFetch(k, v)
				m.Free()
			}
			freeAll(k, v, q)
		}
		a, b = append(a, ca), append(b, cb)
	}
	return a, b
}

// TestRowsEqualAlone: a batched pass through Rows (rows of different
// kinds, offsets and token counts, a window) gives every row exactly the
// spans, cache contents and attention output it gets alone.
func TestRowsEqualAlone(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(7, 8))
	const hq, hkv, d = 4, 2, 32
	a, b := rowCaches(t, r, hkv, d)
	defer func() {
		for i := range a {
			a[i].Free()
			b[i].Free()
		}
	}()
	for step, lens := range [][]int{{1, 5, 2, 1}, {3, 1, 1, 6}, {1, 1, 1, 1}} {
		for _, window := range []int{0, 5} {
			rows := NewRows(a, lens)
			total := rows.Tokens()
			s := newSeq(1, hq, hkv, d, d)
			k, v, q, _ := s.chunk(r, total)
			spans := Spans(rows, total)
			m := rows.MakeMask(total, window, false)
			got := Attend(q, rows.UpdateAndFetch(k, v), m, tensor.SDPAOptions{Scale: 0.125})
			for i, sp := range spans {
				if sp.Offset != b[i].Offset() || sp.Len != lens[i] {
					t.Fatalf("step %d row %d: span %+v, alone offset %d len %d", step, i, sp, b[i].Offset(), lens[i])
				}
				ki, vi, qi := sliceT(k, sp.Start, sp.Start+sp.Len), sliceT(v, sp.Start, sp.Start+sp.Len), sliceT(q, sp.Start, sp.Start+sp.Len)
				mi := b[i].MakeMask(sp.Len, window, false)
				want := Attend(qi, b[i].UpdateAndFetch(ki, vi), mi, tensor.SDPAOptions{Scale: 0.125})
				gi := sliceT(got, sp.Start, sp.Start+sp.Len)
				if !sameBytes(gi, want) {
					t.Fatalf("step %d window %d row %d: batched attention differs from the row alone", step, window, i)
				}
				if a[i].Offset() != b[i].Offset() {
					t.Fatalf("row %d offsets %d vs %d", i, a[i].Offset(), b[i].Offset())
				}
				freeAll(ki, vi, qi, want, gi)
				mi.Free()
			}
			m.Free()
			freeAll(k, v, q, got)
		}
	}
	for i := range a {
		sa, sb := a[i].State(), b[i].State()
		sameState(t, sa, sb)
		sa.Free()
		sb.Free()
	}
}

func TestRowsMisuse(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	c := NewKVCache()
	defer c.Free()
	rows := NewRows([]Cache{c}, []int{2})
	for name, f := range map[string]func(){
		"offset":    func() { rows.Offset() },
		"state":     func() { rows.State() },
		"clone":     func() { rows.Clone() },
		"spans":     func() { Spans(rows, 3) },
		"mask":      func() { rows.MakeMask(1, 0, false) },
		"zero":      func() { NewRows([]Cache{c}, []int{0}) },
		"mismatch":  func() { NewRows([]Cache{c}, []int{1, 1}) },
		"attention": func() { Attention(nil, KV{Rows: &RowsKV{}}, tensor.SDPAOptions{}) },
	} {
		if err := tensor.Try(f); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := rows.SetState(State{}); err == nil {
		t.Error("SetState on a view succeeded")
	}
	if sp := Spans(c, 4); len(sp) != 1 || sp[0] != (Span{0, 4, 0}) {
		t.Errorf("Spans of a plain cache = %v", sp)
	}
}
