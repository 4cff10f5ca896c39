package mlxffi

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestNotFoundNamesEveryPath(t *testing.T) {
	paths := []string{"/nonexistent/a/libmlxc.so", "/nonexistent/b/libmlxc.so"}
	err := loadFrom(paths)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	for _, p := range paths {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %s", err, p)
		}
	}
	if !strings.Contains(err.Error(), EnvLibrary) {
		t.Errorf("error %q does not say how to point at the library", err)
	}
}

func TestSearchPathsHonourEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvLibrary, dir)
	got := searchPaths()
	name, _ := libNames()
	if got[0] != filepath.Join(dir, name) {
		t.Fatalf("first candidate %s, want the %s directory", got[0], EnvLibrary)
	}
	t.Setenv(EnvLibrary, "/some/file.so")
	if got := searchPaths(); got[0] != "/some/file.so" {
		t.Fatalf("first candidate %s, want the env file", got[0])
	}
}

func TestMLXErrorBecomesTensorError(t *testing.T) {
	be := mlxBackend(t)
	a := tensor.FullOn(be, []int{4}, 1, tensor.Float32)
	defer a.Free()
	// bypass the tensor API's checks so MLX itself rejects the reshape
	err := tensor.Try(func() { be.Reshape(a, []int{3}).Free() })
	var te *tensor.Error
	if !errors.As(err, &te) || !errors.Is(err, tensor.ErrBackend) {
		t.Fatalf("err = %v, want a *tensor.Error wrapping ErrBackend", err)
	}
	if te.Op != "Reshape" || !strings.Contains(err.Error(), "reshape") {
		t.Fatalf("err = %v: want Op Reshape and MLX's message", err)
	}
	// the backend still works after a failure
	b := tensor.AddScalar(a, 1)
	defer b.Free()
	if got := b.Float32s(); !slices.Equal(got, []float32{2, 2, 2, 2}) {
		t.Fatalf("after error: %v", got)
	}
}

func TestSliceAssignKeepsOldViews(t *testing.T) {
	be := mlxBackend(t)
	s := tensor.NewScope()
	defer s.Close()
	a := tensor.ArangeOn(be, 0, 6, 1, tensor.Float32)
	view := tensor.SliceAxis(a, 0, 1, 4)
	u := tensor.FullOn(be, []int{2}, -1, tensor.Float32)
	a.SetSlice(u, []int{2}, []int{4}, nil)
	if got := a.Float32s(); !slices.Equal(got, []float32{0, 1, -1, -1, 4, 5}) {
		t.Fatalf("a = %v", got)
	}
	if got := view.Float32s(); !slices.Equal(got, []float32{1, 2, 3}) {
		t.Fatalf("view taken before SetSlice = %v, want old values", got)
	}
}

func TestSDPAMaskedRowsAreZero(t *testing.T) {
	be := mlxBackend(t)
	s := tensor.NewScope()
	defer s.Close()
	q := tensor.FullOn(be, []int{1, 2, 3, 4}, 0.5, tensor.Float32)
	k := tensor.FullOn(be, []int{1, 1, 2, 4}, 0.25, tensor.Float32)
	v := tensor.AddScalar(tensor.ArangeOn(be, 0, 8, 1, tensor.Float32), 1)
	v = tensor.Reshape(v, 1, 1, 2, 4)
	// row 0 sees nothing, rows 1-2 see key 1 only
	mask := tensor.FromBytesOn(be, []byte{0, 0, 0, 1, 0, 1}, []int{3, 2}, tensor.Bool, false)
	out := tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{MaskKind: tensor.MaskArray, Mask: mask})
	got := out.Float32s()
	for h := range 2 {
		row := got[h*12 : h*12+12]
		if !slices.Equal(row[:4], []float32{0, 0, 0, 0}) {
			t.Errorf("head %d masked row = %v, want zeros", h, row[:4])
		}
		if !slices.Equal(row[4:8], []float32{5, 6, 7, 8}) {
			t.Errorf("head %d row 1 = %v, want value row 1", h, row[4:8])
		}
	}
	// additive -inf mask, and causal with more queries than keys
	add := tensor.WhereScalar(mask, tensor.ZerosLike(tensor.AsType(mask, tensor.Float32)), math.Inf(-1))
	out2 := tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{MaskKind: tensor.MaskArray, Mask: add})
	if g := out2.Float32s(); !slices.Equal(g[:4], []float32{0, 0, 0, 0}) || g[4] != 5 {
		t.Errorf("additive mask: %v", g[:8])
	}
	out3 := tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{MaskKind: tensor.MaskCausal})
	if g := out3.Float32s(); !slices.Equal(g[:4], []float32{0, 0, 0, 0}) || g[4] != 1 || g[8] != 3 {
		t.Errorf("causal Tq>Tk: %v", g[:12])
	}
}

func TestSortNaNLast(t *testing.T) {
	be := mlxBackend(t)
	s := tensor.NewScope()
	defer s.Close()
	nan := float32(math.NaN())
	a := tensor.FromBytesOn(be, le32(3, nan, -1, 2), []int{4}, tensor.Float32, false)
	got := tensor.Sort(a, 0).Float32s()
	if !slices.Equal(got[:3], []float32{-1, 2, 3}) || !math.IsNaN(float64(got[3])) {
		t.Fatalf("sort = %v", got)
	}
	idx := tensor.Argsort(a, 0)
	if idx.DType() != tensor.Int32 || !slices.Equal(idx.Int32s(), []int32{2, 3, 0, 1}) {
		t.Fatalf("argsort = %s %v", idx.DType(), idx.Int32s())
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	be := mlxBackend(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				a := tensor.FullOn(be, []int{3}, float64(g), tensor.Float32)
				b := tensor.AddScalar(a, float64(i))
				if got := b.Float32s(); got[2] != float32(g+i) {
					t.Errorf("goroutine %d step %d: %v", g, i, got)
				}
				a.Free()
				b.Free()
			}
		}()
	}
	wg.Wait()
}

func TestCompile(t *testing.T) {
	be := mlxBackend(t)
	calls := 0
	fn := func(in []*tensor.Array) []*tensor.Array {
		calls++
		return []*tensor.Array{tensor.Add(tensor.Mul(in[0], in[1]), in[0])}
	}
	c, err := be.Compile(fn, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	live := tensor.LiveArrays()
	for i := range 3 {
		x := tensor.FullOn(be, []int{4}, float64(i+1), tensor.Float32)
		y := tensor.FullOn(be, []int{4}, 3, tensor.Float32)
		out, err := c.Call(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if got := out[0].Float32s(); got[0] != float32((i+1)*3+i+1) {
			t.Fatalf("call %d = %v", i, got)
		}
		tensor.Free(out...)
		tensor.Free(x, y)
	}
	if calls != 1 {
		t.Errorf("traced %d times for one shape, want 1", calls)
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("compiled calls leaked %d arrays", d)
	}
	// a failing Go function surfaces as an error, not a crash
	bad, err := be.Compile(func(in []*tensor.Array) []*tensor.Array {
		return []*tensor.Array{tensor.Add(in[0], tensor.FullOn(be, []int{5}, 1, tensor.Float32))}
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Free()
	x := tensor.FullOn(be, []int{4}, 1, tensor.Float32)
	defer x.Free()
	if _, err := bad.Call(x); err == nil || !strings.Contains(err.Error(), "broadcast") {
		t.Fatalf("bad compiled call err = %v", err)
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	be := mlxBackend(t)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	a := tensor.ArangeOn(be, 0, 6, 1, tensor.BFloat16)
	b := tensor.FullOn(be, []int{2, 2}, 7, tensor.Int32)
	defer tensor.Free(a, b)
	if err := be.SaveSafetensors(path, map[string]*tensor.Array{"a": a, "b": b}, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	arrs, meta, err := be.LoadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range arrs {
			x.Free()
		}
	}()
	if meta["format"] != "mlx" || len(arrs) != 2 {
		t.Fatalf("meta %v, %d arrays", meta, len(arrs))
	}
	if got := arrs["a"]; got.DType() != tensor.BFloat16 || !slices.Equal(got.Float32s(), []float32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("a = %s %v", got.DType(), got.Float32s())
	}
	if got := arrs["b"]; !slices.Equal(got.Shape(), []int{2, 2}) || got.Int32s()[3] != 7 {
		t.Fatalf("b = %v %v", got.Shape(), got.Int32s())
	}
	if _, _, err := be.LoadSafetensors(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("loading a missing file succeeded")
	}
	_ = os.Remove(path)
}

func TestRuntimeInfo(t *testing.T) {
	mlxBackend(t)
	if !DeviceAvailable(CPU) {
		t.Fatal("CPU device unavailable")
	}
	n, err := DeviceCount(CPU)
	if err != nil || n < 1 {
		t.Fatalf("cpu count %d, %v", n, err)
	}
	info, err := DeviceInfo(CPU)
	t.Logf("gpu available: %v; cpu info: %v (%v)", DeviceAvailable(GPU), info, err)
	st, err := NewStream(CPU)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	if err := st.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(st.String()), "cpu") {
		t.Errorf("stream %q", st.String())
	}
	prev, err := SetCacheLimit(1 << 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SetCacheLimit(prev); err != nil {
		t.Fatal(err)
	}
	if err := ClearCache(); err != nil {
		t.Fatal(err)
	}
	if _, err := PeakMemory(); err != nil {
		t.Fatal(err)
	}
}

// TestHasGPUAgreesWithDevices: HasGPU is true exactly when MLX counts a
// GPU device, and Open's default stream is on the GPU exactly then (the
// CLI's auto backend relies on both answers being the same).
func TestHasGPUAgreesWithDevices(t *testing.T) {
	be := mlxBackend(t)
	gpu, err := HasGPU()
	if err != nil {
		t.Fatal(err)
	}
	n, err := DeviceCount(GPU)
	if err != nil {
		t.Fatal(err)
	}
	if gpu != (n > 0) {
		t.Errorf("HasGPU %v with %d GPU devices", gpu, n)
	}
	if want := map[bool]DeviceType{true: GPU, false: CPU}[gpu]; be.Device() != want {
		t.Errorf("Open's device is %s with HasGPU %v", be.Device(), gpu)
	}
	t.Logf("MLX GPU device: %v (%d)", gpu, n)
}
