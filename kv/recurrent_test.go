package kv

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func randArr(r *rand.Rand, shape ...int) *tensor.Array {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return tensor.FromFloat32(randVals(r, n), shape, tensor.Float32)
}

// TestRecurrentCacheContract: updates replace the pair and advance the
// offset; a State taken before later updates restores them exactly; a
// clone is independent; nothing trims; UpdateAndFetch refuses; a saved
// and loaded cache holds the same values and offset.
func TestRecurrentCacheContract(t *testing.T) {
	before := tensor.LiveArrays()
	r := rand.New(rand.NewPCG(1, 2))
	c := NewRecurrentCache()
	if c.Offset() != 0 || c.Conv() != nil || c.IsTrimmable() || c.Trim(3) != 0 {
		t.Fatal("fresh cache: want empty, untrimmable")
	}
	c.Update(randArr(r, 1, 3, 8), randArr(r, 1, 2, 4, 4), 5)
	snap := c.State()
	conv0, st0 := c.Conv().Float32s(), c.Recurrent().Float32s()
	clone := c.Clone()
	c.Update(randArr(r, 1, 3, 8), randArr(r, 1, 2, 4, 4), 1)
	if c.Offset() != 6 || slices.Equal(c.Conv().Float32s(), conv0) {
		t.Fatalf("after a second update: offset %d, conv unchanged %v", c.Offset(), slices.Equal(c.Conv().Float32s(), conv0))
	}
	if clone.Offset() != 5 || !slices.Equal(clone.(*RecurrentCache).Conv().Float32s(), conv0) {
		t.Fatal("the clone changed with the original")
	}
	if err := c.SetState(snap); err != nil {
		t.Fatal(err)
	}
	snap.Free()
	if c.Offset() != 5 || !slices.Equal(c.Conv().Float32s(), conv0) || !slices.Equal(c.Recurrent().Float32s(), st0) {
		t.Fatal("restore did not bring back the snapshot")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("UpdateAndFetch did not panic")
			}
		}()
		c.UpdateAndFetch(nil, nil)
	}()
	if err := c.SetState(State{Kind: KindKV}); err == nil {
		t.Error("a KVCache state was accepted")
	}

	path := filepath.Join(t.TempDir(), "rec.kv")
	if err := Save(path, []Cache{c, NewKVCache()}, []int32{1, 2, 3, 4, 5}, Meta{ModelID: "m"}); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path, Expect{ModelID: "m", Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.Caches[0].(*RecurrentCache)
	if !ok || got.Offset() != 5 || !slices.Equal(got.Conv().Float32s(), conv0) || !slices.Equal(got.Recurrent().Float32s(), st0) {
		t.Fatalf("loaded cache %T does not hold the saved state", s.Caches[0])
	}
	s.Free()
	c.Free()
	clone.Free()
	if after := tensor.LiveArrays(); after != before {
		t.Errorf("live arrays %d → %d", before, after)
	}
}
