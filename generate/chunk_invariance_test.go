package generate_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// chunkedLogits feeds ids through fresh caches (contiguous, or paged
// over pool) in chunks of chunk tokens and returns the logits of every
// position, as float32 bits.
func chunkedLogits(t *testing.T, m generate.Model, ids []int32, chunk int, pool *kv.Pool) []uint32 {
	t.Helper()
	var caches []kv.Cache
	if pool != nil {
		caches = pool.NewCaches()
	} else {
		caches = m.MakeCaches()
	}
	defer model.FreeCaches(caches)
	var out []uint32
	for lo := 0; lo < len(ids); lo += chunk {
		hi := min(len(ids), lo+chunk)
		err := tensor.Try(func() {
			sc := tensor.NewScope()
			defer sc.Close()
			h, err := m.Forward(tensor.FromInt32(ids[lo:hi], []int{1, hi - lo}), caches)
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Logits(h)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tensor.AsType(l, tensor.Float32).Float32s() {
				out = append(out, mathFloat32bits(x))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestChunkInvariantLogits: on the CPU backend the logits of every
// position are bit-identical whether the sequence is fed one token at a
// time, in chunks of 7 or in one pass of 2048, through contiguous or paged
// caches, on every fixture (sliding windows included: the prompt is longer
// than any window) in float32 and bfloat16.
func TestChunkInvariantLogits(t *testing.T) {
	for _, name := range allFixtures {
		for _, dt := range []string{"f32", "bf16"} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				m := loadModel(t, filepath.Join(fixtures, name, dt), nil)
				defer tensortest.NoLeaks(t)()
				r := rand.New(rand.NewPCG(4, uint64(len(name))))
				ids := randomIDs(r, m.VocabSize(), 40)
				want := chunkedLogits(t, m, ids, 2048, nil)
				pool := poolFor(t, m, 4, 64)
				defer pool.Free()
				for _, chunk := range []int{1, 7, 2048} {
					for _, p := range []*kv.Pool{nil, pool} {
						if got := chunkedLogits(t, m, ids, chunk, p); !slices.Equal(got, want) {
							i := 0
							for i < len(got) && got[i] == want[i] {
								i++
							}
							t.Errorf("chunk %d (paged %v): logits differ from one pass at position %d", chunk, p != nil, i/m.VocabSize())
						}
					}
				}
			})
		}
	}
}
