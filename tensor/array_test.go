package tensor_test

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

func TestScopeFreesAllButKept(t *testing.T) {
	before := tensor.LiveArrays()
	var kept *tensor.Array
	func() {
		s := tensor.NewScope()
		defer s.Close()
		_ = tensor.Zeros([]int{4}, tensor.Float32)
		_ = tensor.Ones([]int{2, 2}, tensor.BFloat16)
		kept = s.Keep(tensor.Full([]int{3}, 7, tensor.Int32))
		if s.Len() != 2 {
			t.Errorf("scope holds %d arrays, want 2", s.Len())
		}
	}()
	if got := tensor.LiveArrays() - before; got != 1 {
		t.Fatalf("%d arrays alive after Close, want 1 (the kept one)", got)
	}
	if v := kept.Int64s(); len(v) != 3 || v[0] != 7 {
		t.Fatalf("kept array = %v", v)
	}
	kept.Free()
	kept.Free() // freeing twice is a no-op
	if tensor.LiveArrays() != before {
		t.Fatalf("live arrays %d, want %d", tensor.LiveArrays(), before)
	}
}

func TestNestedScopeKeepMovesToParent(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	outer := tensor.NewScope()
	inner := tensor.NewScope()
	a := tensor.Zeros([]int{2}, tensor.Float32)
	inner.Keep(a)
	inner.Close()
	if a.Freed() {
		t.Fatal("kept array freed by inner scope")
	}
	if outer.Len() != 1 {
		t.Fatalf("outer scope holds %d, want 1", outer.Len())
	}
	outer.Close()
	if !a.Freed() {
		t.Fatal("outer scope did not free the array kept from the inner one")
	}
}

func TestClosingOuterScopeClosesInner(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	outer := tensor.NewScope()
	_ = tensor.NewScope() // left open by mistake
	b := tensor.Zeros([]int{2}, tensor.Float32)
	outer.Close()
	if !b.Freed() {
		t.Fatal("array of an inner scope left open survived the outer Close")
	}
	c := tensor.Zeros([]int{1}, tensor.Float32)
	if c.Freed() {
		t.Fatal("array made after Close was freed")
	}
	c.Free()
}

func TestWithScope(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	out := tensor.WithScope(func() []*tensor.Array {
		_ = tensor.Zeros([]int{8}, tensor.Float32)
		return []*tensor.Array{tensor.Full([]int{2}, 3, tensor.Float32)}
	})
	if len(out) != 1 || out[0].Freed() || out[0].Float32s()[1] != 3 {
		t.Fatalf("WithScope result %v", out)
	}
	out[0].Free()
}

func TestUseAfterFreeIsAnError(t *testing.T) {
	a := tensor.Zeros([]int{2}, tensor.Float32)
	a.Free()
	err := tensor.Try(func() { _ = a.Shape() })
	var te *tensor.Error
	if !errors.As(err, &te) || !errors.Is(err, tensor.ErrFreed) {
		t.Fatalf("Try = %v, want ErrFreed", err)
	}
}

func TestTryConvertsRuntimePanics(t *testing.T) {
	err := tensor.Try(func() {
		var s []int
		_ = s[3]
	})
	if !errors.Is(err, tensor.ErrBackend) {
		t.Fatalf("Try = %v, want ErrBackend", err)
	}
}

func TestRecover(t *testing.T) {
	f := func() (err error) {
		defer tensor.Recover(&err)
		_ = tensor.FromBytes([]byte{1, 2, 3}, []int{1}, tensor.Float32)
		return nil
	}
	if err := f(); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("Recover gave %v, want ErrShape", err)
	}
}

func TestFromBytesRoundTrip(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	raw := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0}
	a := tensor.FromBytes(raw, []int{2, 3}, tensor.Int32)
	defer a.Free()
	if got := a.Int64s(); len(got) != 6 || got[5] != 6 {
		t.Fatalf("Int64s = %v", got)
	}
	raw[0] = 9 // the array holds a copy
	if a.Int64s()[0] != 1 {
		t.Fatal("FromBytes did not copy")
	}
	// views: transpose then read back in row-major order of the view
	tr := tensor.Transpose(a)
	defer tr.Free()
	if got := tr.Int64s(); got[0] != 1 || got[1] != 4 || got[2] != 2 {
		t.Fatalf("transposed = %v", got)
	}
	sl := tensor.Slice(a, []int{0, 1}, []int{2, 3}, []int{1, 2})
	defer sl.Free()
	if got := sl.Int64s(); len(got) != 2 || got[0] != 2 || got[1] != 5 {
		t.Fatalf("slice = %v", got)
	}
}

func TestSetSliceCopyOnWrite(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	a := tensor.Zeros([]int{2, 4}, tensor.Float32)
	defer a.Free()
	view := tensor.SliceAxis(a, 1, 0, 2)
	defer view.Free()
	upd := tensor.Ones([]int{2, 2}, tensor.Float32)
	defer upd.Free()
	a.SetSlice(upd, []int{0, 1}, []int{2, 3}, nil)
	if got := a.Float32s(); got[1] != 1 || got[2] != 1 || got[0] != 0 || got[5] != 1 {
		t.Fatalf("after SetSlice a = %v", got)
	}
	if got := view.Float32s(); got[1] != 0 {
		t.Fatalf("view taken before SetSlice changed: %v", got)
	}
}

func TestShapeErrors(t *testing.T) {
	a := tensor.Zeros([]int{2, 3}, tensor.Float32)
	defer a.Free()
	for name, f := range map[string]func(){
		"reshape":   func() { tensor.Reshape(a, 4, 2) },
		"transpose": func() { tensor.Transpose(a, 0, 0) },
		"squeeze":   func() { tensor.Squeeze(a, 0) },
		"broadcast": func() { tensor.BroadcastTo(a, 3, 3) },
		"fromfloat": func() { tensor.FromFloat32([]float32{1}, []int{2}, tensor.Float32) },
	} {
		if err := tensor.Try(f); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
