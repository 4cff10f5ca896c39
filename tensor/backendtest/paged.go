package backendtest

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// pagedCase is one paged-attention check: T queries against kvLen keys
// held in blocks of bs positions of a pool with extra blocks.
type pagedCase struct {
	hq, hkv, tq, kvLen, d, bs int
	mask                      string // "none", "causal", "bool" (a sliding window)
	sinks                     bool
}

func (p pagedCase) String() string {
	s := fmt.Sprintf("hq%d_hkv%d_tq%d_kv%d_d%d_bs%d_%s", p.hq, p.hkv, p.tq, p.kvLen, p.d, p.bs, p.mask)
	if p.sinks {
		s += "_sinks"
	}
	return s
}

// pagedCases check ScaledDotProductAttentionPaged against
// ScaledDotProductAttention on the same keys and values stored
// contiguously: the results must be the same bytes (a backend may read
// the blocks in place or gather them; either way it is the same
// attention). Tables are shuffled, kvLen is rarely a multiple of the
// block size, and the pool's unused slots hold other values.
func pagedCases() []testCase {
	var cs []testCase
	list := []pagedCase{
		{2, 2, 1, 5, 16, 4, "none", false},
		{4, 2, 1, 37, 16, 8, "causal", false},
		{8, 2, 3, 37, 32, 16, "causal", true},
		{4, 1, 5, 64, 16, 16, "bool", false},
		{8, 1, 1, 130, 64, 32, "causal", false},
		{4, 4, 2, 9, 8, 1, "causal", false},
		{2, 1, 4, 4, 16, 64, "causal", false},
		{4, 2, 1, 0, 16, 4, "none", true},
	}
	for _, p := range list {
		for _, dt := range floatTypes {
			cs = append(cs, testCase{fmt.Sprintf("%s/%s", dt, p), func(c *checker) {
				used := (p.kvLen + p.bs - 1) / p.bs
				nb := used + 3
				q, _ := c.in([]int{1, p.hq, p.tq, p.d}, dt, uni(-1, 1), dense)
				k, kv := c.in([]int{1, p.hkv, p.kvLen, p.d}, dt, uni(-1, 1), dense)
				v, vv := c.in([]int{1, p.hkv, p.kvLen, p.d}, dt, uni(-1, 1), dense)
				perm := c.rng.Perm(nb)
				table := make([]int32, used)
				for i := range table {
					table[i] = int32(perm[i])
				}
				// pools: garbage everywhere, then the keys in their slots
				pool := func(vals []float64) *tensor.Array {
					pv := make([]float64, nb*p.hkv*p.bs*p.d)
					for i := range pv {
						pv[i] = roundTo(uni(-2, 2)(c.rng), dt)
					}
					for h := range p.hkv {
						for pos := range p.kvLen {
							blk, slot := int(table[pos/p.bs]), pos%p.bs
							copy(pv[((blk*p.hkv+h)*p.bs+slot)*p.d:][:p.d], vals[(h*p.kvLen+pos)*p.d:][:p.d])
						}
					}
					return c.arr(pv, []int{nb, p.hkv, p.bs, p.d}, dt)
				}
				kp, vp := pool(kv), pool(vv)
				o := tensor.SDPAOptions{}
				switch p.mask {
				case "causal":
					o.MaskKind = tensor.MaskCausal
				case "bool":
					mv := make([]float64, p.tq*p.kvLen)
					for i := range p.tq {
						pos := p.kvLen - p.tq + i
						for j := range p.kvLen {
							mv[i*p.kvLen+j] = boolOf(j <= pos && j > pos-9)
						}
					}
					o.MaskKind, o.Mask = tensor.MaskArray, c.arr(mv, []int{p.tq, p.kvLen}, tensor.Bool)
				}
				if p.sinks {
					sv := make([]float64, p.hq)
					for i := range sv {
						sv[i] = roundTo(uni(-1, 1)(c.rng), tensor.Float32)
					}
					o.Sinks = c.arr(sv, []int{p.hq}, tensor.Float32)
				}
				got := c.T(tensor.ScaledDotProductAttentionPaged(q, kp, vp, table, p.kvLen, o))
				want := c.T(tensor.ScaledDotProductAttention(q, k, v, o))
				if !slices.Equal(got.Shape(), want.Shape()) || got.DType() != want.DType() {
					c.Errorf("paged SDPA: %s%v, want %s%v", got.DType(), got.Shape(), want.DType(), want.Shape())
					return
				}
				if gb, wb := got.Bytes(), want.Bytes(); !bytes.Equal(gb, wb) {
					g, w := vals(got), vals(want)
					for i := range g {
						if g[i] != w[i] && !(math.IsNaN(g[i]) && math.IsNaN(w[i])) {
							c.Errorf("paged SDPA: element %d = %g, contiguous SDPA %g", i, g[i], w[i])
							return
						}
					}
					c.Errorf("paged SDPA: bytes differ from contiguous SDPA")
				}
			}})
		}
	}
	// malformed tables are refused
	cs = append(cs, testCase{"errors", func(c *checker) {
		q, _ := c.in([]int{1, 2, 1, 8}, tensor.Float32, uni(-1, 1), dense)
		kp, _ := c.in([]int{3, 1, 4, 8}, tensor.Float32, uni(-1, 1), dense)
		c.checkErr("short table", tensor.ErrArgument, func() {
			c.T(tensor.ScaledDotProductAttentionPaged(q, kp, kp, []int32{0}, 5, tensor.SDPAOptions{}))
		})
		c.checkErr("block out of range", tensor.ErrArgument, func() {
			c.T(tensor.ScaledDotProductAttentionPaged(q, kp, kp, []int32{0, 3}, 5, tensor.SDPAOptions{}))
		})
		qb, _ := c.in([]int{2, 2, 1, 8}, tensor.Float32, uni(-1, 1), dense)
		c.checkErr("batch 2", tensor.ErrShape, func() {
			c.T(tensor.ScaledDotProductAttentionPaged(qb, kp, kp, []int32{0}, 3, tensor.SDPAOptions{}))
		})
	}})
	return cs
}
