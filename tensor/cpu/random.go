package cpu

import (
	"math/bits"

	"github.com/mlxgo/mlxgo/tensor"
)

// threefry2x32 is the 20-round Threefry-2x32 block function keyed by (k0,
// k1) applied to the counter (c0, c1), the generator MLX's random module is
// built on; keeping it bit-identical lets mlxgo reproduce mlx.random streams.
func threefry2x32(k0, k1, c0, c1 uint32) (uint32, uint32) {
	ks := [3]uint32{k0, k1, k0 ^ k1 ^ 0x1BD11BDA}
	rot := [2][4]int{{13, 15, 26, 6}, {17, 29, 16, 24}}
	x0, x1 := c0+ks[0], c1+ks[1]
	for i := 0; i < 5; i++ {
		for _, r := range rot[i%2] {
			x0 += x1
			x1 = bits.RotateLeft32(x1, r) ^ x0
		}
		x0 += ks[(i+1)%3]
		x1 += ks[(i+2)%3] + uint32(i+1)
	}
	return x0, x1
}

// RandomBits fills shape with 32-bit words derived from key. The layout
// follows MLX's CPU kernel, which is what makes seeds portable: for n
// words and h = n/2, counter pair (i, i+h+n%2) fills words i and i+h+n%2,
// and an odd n takes its middle word from the first half of counter (h, 0).
func (be *Backend) RandomBits(key *tensor.Array, shape []int) *tensor.Array {
	ki := get(key)
	kd := u32s(ki.buf.data)
	k0 := kd[ki.off]
	k1 := kd[ki.off+ki.strides[0]]
	out, im := be.newArray(shape, tensor.Uint32)
	n := numel(shape)
	if n == 0 {
		return out
	}
	dst := u32s(bytesOf(im, n, 4))
	half := n / 2
	odd := n % 2
	parallelFor(half, 1<<14, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c2 := c + half + odd
			dst[c], dst[c2] = threefry2x32(k0, k1, uint32(c), uint32(c2))
		}
	})
	if odd == 1 {
		dst[half], _ = threefry2x32(k0, k1, uint32(half), 0)
	}
	return out
}
