package serve

import (
	"bytes"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestAdapterModelOutputs: the batched lane's model with adapters mounted
// is an OutputForwarder (so its prompt passes skip the last layer's work
// for unsampled positions), and its positions are the full pass's bits.
func TestAdapterModelOutputs(t *testing.T) {
	f := openLoraFixture(t)
	defer tensortest.NoLeaks(t)()
	var m generate.Model = f.am
	of, ok := m.(generate.OutputForwarder)
	if !ok {
		t.Fatal("AdapterModel is not a generate.OutputForwarder")
	}
	ids := tensor.FromInt32([]int32{5, 9, 13, 17, 21, 25, 29}, []int{1, 7})
	defer ids.Free()
	for _, pos := range [][]int32{{6}, {1, 6}} {
		full, err := m.Forward(ids, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := of.ForwardOutputs(ids, nil, pos)
		if err != nil {
			t.Fatal(err)
		}
		idx := tensor.FromInt32(pos, []int{len(pos)})
		want := tensor.Take(full, idx, 1)
		if got.Dim(1) != len(pos) || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("positions %v: not the full pass's rows (shape %v)", pos, got.Shape())
		}
		tensor.Free(full, got, idx, want)
	}
}
