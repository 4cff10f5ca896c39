package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestSDPAKeyStartWindow: with SDPAOptions.KeyStart naming the position
// of key 0, a query of a prefill call over a sliding window's keys (the
// window of the chunk's first query onward, masked per row) gives the
// same bits as the query alone over exactly its own window (a decode
// step's keys, no mask), wherever the window starts relative to the
// kernel's key blocks and chunks.
func TestSDPAKeyStartWindow(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(21, 22))
		cases := []struct{ hq, hkv, t, off, w, d int }{
			{2, 1, 7, 30, 8, 64},
			{8, 2, 13, 100, 37, 128},
			{4, 4, 9, 1000, 70, 64},
			{4, 1, 5, 1500, 600, 128},
		}
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for _, c := range cases {
				name := fmt.Sprintf("%s/T%d_off%d_w%d_d%d", dt, c.t, c.off, c.w, c.d)
				s := tensor.NewScope()
				L := c.off + c.t
				k := tensor.FromFloat32(randF32(r, c.hkv*L*c.d), []int{1, c.hkv, L, c.d}, dt)
				v := tensor.FromFloat32(randF32(r, c.hkv*L*c.d), []int{1, c.hkv, L, c.d}, dt)
				q := tensor.FromFloat32(randF32(r, c.hq*c.t*c.d), []int{1, c.hq, c.t, c.d}, dt)
				start := c.off - c.w + 1 // the first query's window
				whole := func() *tensor.Array {
					nk := L - start
					bm := make([]bool, c.t*nk)
					for i := range c.t {
						for j := range nk {
							p, kp := c.off+i, start+j
							bm[i*nk+j] = kp <= p && kp > p-c.w
						}
					}
					o := tensor.SDPAOptions{MaskKind: tensor.MaskArray, Mask: tensor.FromBools(bm, []int{c.t, nk}), KeyStart: start}
					ks, vs := tensor.SliceAxis(k, 2, start, L), tensor.SliceAxis(v, 2, start, L)
					return tensor.Contiguous(tensor.SwapAxes(tensor.ScaledDotProductAttention(q, ks, vs, o), 1, 2))
				}
				one := func(i int) *tensor.Array {
					p := c.off + i
					lo := p - c.w + 1
					qi := tensor.SliceAxis(q, 2, i, i+1)
					ks, vs := tensor.SliceAxis(k, 2, lo, p+1), tensor.SliceAxis(v, 2, lo, p+1)
					o := tensor.SDPAOptions{KeyStart: lo}
					return tensor.Contiguous(tensor.SwapAxes(tensor.ScaledDotProductAttention(qi, ks, vs, o), 1, 2))
				}
				checkRowInvariant(t, name, c.t, whole, one)
				s.Close()
			}
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}
