package cpu_test

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestSDPATurboRefuses: rows of the wrong length or dtype, and layouts
// that disagree with the query, are shape errors, not panics of another
// kind or wrong results.
func TestSDPATurboRefuses(t *testing.T) {
	be := &cpu.Backend{}
	levels := make([]float32, 8)
	signs := make([]float32, 64)
	l := tensor.TurboLayout{KeyBits: 8, ValueBits: 3, KeyDim: 64, ValueDim: 64, Group: 32, Levels: levels, Signs: signs}
	q := tensor.FullOn(be, []int{1, 4, 1, 64}, 0.5, tensor.Float32)
	good := func(n int) *tensor.Array { return tensor.FullOn(be, []int{1, 2, 5, n}, 0, tensor.Uint8) }
	defer q.Free()
	for name, args := range map[string]func() (*tensor.Array, *tensor.Array, tensor.TurboLayout){
		"key row length": func() (*tensor.Array, *tensor.Array, tensor.TurboLayout) { return good(71), good(l.ValueBytes()), l },
		"value dtype": func() (*tensor.Array, *tensor.Array, tensor.TurboLayout) {
			return good(l.KeyBytes()), tensor.FullOn(be, []int{1, 2, 5, l.ValueBytes()}, 0, tensor.Float32), l
		},
		"key dim": func() (*tensor.Array, *tensor.Array, tensor.TurboLayout) {
			m := l
			m.KeyDim = 128
			return good(m.KeyBytes()), good(l.ValueBytes()), m
		},
		"levels": func() (*tensor.Array, *tensor.Array, tensor.TurboLayout) {
			m := l
			m.Levels = levels[:4]
			return good(l.KeyBytes()), good(l.ValueBytes()), m
		},
	} {
		k, v, lay := args()
		err := tensor.Try(func() { be.SDPATurbo(q, k, v, lay, tensor.SDPAOptions{}) })
		if !errors.Is(err, tensor.ErrShape) {
			t.Errorf("%s: %v, want a shape error", name, err)
		}
		tensor.Free(k, v)
	}
	// all-zero codes, zero scales: keys and rotated values decode to 0, so
	// the output is 0 whatever the softmax
	k, v := good(l.KeyBytes()), good(l.ValueBytes())
	out := be.SDPATurbo(q, k, v, l, tensor.SDPAOptions{MaskKind: tensor.MaskCausal})
	for i, x := range out.Float32s() {
		if x != 0 {
			t.Fatalf("out[%d] = %v for zero codes", i, x)
		}
	}
	tensor.Free(k, v, out)
}
