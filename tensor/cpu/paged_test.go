package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// pagedPools stores k and v ([1, H, L, D]) in the blocks of pools of nb
// blocks of bs positions, at a shuffled table, the other slots random.
func pagedPools(r *rand.Rand, k, v *tensor.Array, bs, nb int) (kp, vp *tensor.Array, table []int32) {
	h, l := k.Dim(1), k.Dim(2)
	used := (l + bs - 1) / bs
	perm := r.Perm(nb)
	table = make([]int32, used)
	for i := range table {
		table[i] = int32(perm[i])
	}
	pool := func(a *tensor.Array) *tensor.Array {
		d := a.Dim(3)
		av := a.Float32s()
		pv := randF32(r, nb*h*bs*d)
		for hh := range h {
			for pos := range l {
				blk, slot := int(table[pos/bs]), pos%bs
				copy(pv[((blk*h+hh)*bs+slot)*d:][:d], av[(hh*l+pos)*d:][:d])
			}
		}
		return tensor.FromFloat32(pv, []int{nb, h, bs, d}, a.DType())
	}
	return pool(k), pool(v), table
}

// TestSDPAPagedBitExact: attention over keys and values in a block pool
// (shuffled tables, kvLen rarely a multiple of the block size, across
// key chunks) gives the same bytes as attention over the same keys stored
// contiguously, for decode and prefill-sized query blocks, every block
// size the pool may use, GQA 1/4/8, head dims 64/128/256, masks and
// sinks, three dtypes and several worker counts.
func TestSDPAPagedBitExact(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(15, 16))
		type pc struct {
			hq, hkv, tq, kvLen, d, bs int
			dt                        tensor.DType
			mask                      string
			sinks                     bool
		}
		cases := []pc{
			{32, 8, 1, 1000, 128, 16, tensor.BFloat16, "causal", false},
			{8, 2, 1, 1537, 64, 32, tensor.Float16, "none", true},
			{8, 1, 7, 700, 256, 64, tensor.Float32, "causal", false},
			{4, 4, 13, 300, 64, 128, tensor.BFloat16, "window", false},
			{16, 2, 1, 2049, 128, 256, tensor.BFloat16, "causal", true},
			{8, 2, 40, 77, 128, 16, tensor.Float16, "causal", false},
			{4, 1, 3, 5, 64, 256, tensor.Float32, "causal", false},
		}
		for _, c := range cases {
			name := fmt.Sprintf("%s/hq%d_hkv%d_tq%d_kv%d_d%d_bs%d_%s", c.dt, c.hq, c.hkv, c.tq, c.kvLen, c.d, c.bs, c.mask)
			s := tensor.NewScope()
			q := tensor.FromFloat32(randF32(r, c.hq*c.tq*c.d), []int{1, c.hq, c.tq, c.d}, c.dt)
			k := tensor.FromFloat32(randF32(r, c.hkv*c.kvLen*c.d), []int{1, c.hkv, c.kvLen, c.d}, c.dt)
			v := tensor.FromFloat32(randF32(r, c.hkv*c.kvLen*c.d), []int{1, c.hkv, c.kvLen, c.d}, c.dt)
			kp, vp, table := pagedPools(r, k, v, c.bs, (c.kvLen+c.bs-1)/c.bs+5)
			var o tensor.SDPAOptions
			switch c.mask {
			case "causal":
				o.MaskKind = tensor.MaskCausal
			case "window":
				ic := sdpaInvCase{mask: "window", window: 50}
				o = ic.options(c.kvLen-c.tq, c.tq, c.kvLen, nil)
			}
			if c.sinks {
				o.Sinks = tensor.FromFloat32(randF32(r, c.hq), []int{c.hq}, tensor.Float32)
			}
			want := tensor.ScaledDotProductAttention(q, k, v, o).Bytes()
			for _, p := range invProcs {
				var got []byte
				withProcs(p, func() { got = tensor.ScaledDotProductAttentionPaged(q, kp, vp, table, c.kvLen, o).Bytes() })
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: paged result (GOMAXPROCS=%d) differs from contiguous", name, p)
				}
			}
			s.Close()
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}
