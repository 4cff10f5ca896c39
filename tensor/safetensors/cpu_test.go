package safetensors

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestCPUBackend reads a file into the real CPU backend, borrowed and
// copied, with a tensor large enough (4 MiB) for the copy to take the
// backend's huge-page path.
func TestCPUBackend(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	big := Tensor{Name: "big", DType: tensor.BFloat16, Shape: []int{1024, 2048}, Data: randBytes(r, 1024*2048*2)}
	small := Tensor{Name: "small", DType: tensor.Float32, Shape: []int{3}, Data: f32le(1.5, -2, 4)}
	path := filepath.Join(t.TempDir(), "cpu.safetensors")
	if err := Write(path, []Tensor{big, small}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	live := tensor.LiveArrays()
	for _, cp := range []bool{false, true} {
		a, err := f.Array("big", cpu.Default, cp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), big.Data) {
			t.Errorf("copy=%v: big tensor differs", cp)
		}
		s, err := f.Array("small", cpu.Default, cp)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Float32s(); len(got) != 3 || got[0] != 1.5 || got[1] != -2 || got[2] != 4 {
			t.Errorf("copy=%v: small = %v", cp, got)
		}
		tensor.Free(a, s)
	}
	if tensor.LiveArrays() != live {
		t.Errorf("LiveArrays %d, want %d", tensor.LiveArrays(), live)
	}
}
