package cpu_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// turboRows makes n random coded rows of a layout: random codes, and
// float16 scales (and key biases) of moderate size.
func turboRows(r *rand.Rand, hkv, n, d, bits, perGroup int) []byte {
	rowLen := d*bits/8 + 2*perGroup*(d/32)
	out := make([]byte, hkv*n*rowLen)
	for i := range hkv * n {
		row := out[i*rowLen : (i+1)*rowLen]
		for j := range d * bits / 8 {
			row[j] = byte(r.IntN(256))
		}
		meta := row[d*bits/8:]
		for j := 0; j < len(meta); j += 2 {
			h := tensor.F32ToF16(float32(0.02 + 0.05*r.Float64()))
			meta[j], meta[j+1] = byte(h), byte(h>>8)
		}
	}
	return out
}

// TestSDPATurboRowInvariant: each query row's output is the same bits
// whether the row is attended alone (a decode step over exactly the keys
// it sees) or inside a causal chunk of many rows over more keys, on
// contexts spanning several key spans, with every key-span split the
// backend may choose (few heads, many workers: split; many rows: not);
// and under a sliding window whose first key is not at position 0
// (KeyStart), whether the call's keys start before the query's window
// (a prefill chunk) or at it (a decode step).
func TestSDPATurboRowInvariant(t *testing.T) {
	be := &cpu.Backend{}
	r := rand.New(rand.NewPCG(5, 5))
	const hq, hkv, d, tk, lq = 4, 2, 64, 1300, 40
	// 8 workers: a lone row's 2 heads split their key spans over them
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	for _, kv := range [][2]int{{8, 3}, {4, 2}, {8, 8}} {
		t.Run(fmt.Sprintf("k%dv%d", kv[0], kv[1]), func(t *testing.T) {
			levels := make([]float32, 1<<kv[1])
			for i := range levels {
				levels[i] = float32(i) - float32(len(levels)-1)/2
			}
			signs := make([]float32, d)
			for i := range signs {
				signs[i] = float32(1 - 2*r.IntN(2))
			}
			l := tensor.TurboLayout{KeyBits: kv[0], ValueBits: kv[1], KeyDim: d, ValueDim: d, Group: 32, Levels: levels, Signs: signs}
			keys := tensor.FromBytesOn(be, turboRows(r, hkv, tk, d, kv[0], 2), []int{1, hkv, tk, l.KeyBytes()}, tensor.Uint8, false)
			values := tensor.FromBytesOn(be, turboRows(r, hkv, tk, d, kv[1], 1), []int{1, hkv, tk, l.ValueBytes()}, tensor.Uint8, false)
			qv := make([]float32, hq*lq*d)
			for i := range qv {
				qv[i] = float32(r.NormFloat64())
			}
			q := tensor.FromFloat32On(be, qv, []int{1, hq, lq, d}, tensor.Float32)
			defer tensor.Free(keys, values, q)
			chunk := be.SDPATurbo(q, keys, values, l, tensor.SDPAOptions{MaskKind: tensor.MaskCausal})
			defer chunk.Free()
			got := chunk.Float32s()
			for li := range lq {
				n := tk - lq + li + 1
				qi := tensor.SliceAxis(q, 2, li, li+1)
				ki, vi := tensor.SliceAxis(keys, 2, 0, n), tensor.SliceAxis(values, 2, 0, n)
				one := be.SDPATurbo(qi, ki, vi, l, tensor.SDPAOptions{})
				alone := one.Float32s()
				for h := range hq {
					want := alone[h*d : (h+1)*d]
					row := got[(h*lq+li)*d : (h*lq+li+1)*d]
					if !bytes.Equal(f32bytes(row), f32bytes(want)) {
						t.Fatalf("row %d head %d: chunk %v…, alone %v…", li, h, row[:3], want[:3])
					}
				}
				tensor.Free(qi, ki, vi, one)
			}
			// a sliding window of w keys: the chunk reads keys from
			// position c0 on (KeyStart c0) under a window mask; alone, each
			// query reads exactly its window, from its own first position
			const w = 700
			c0 := tk - lq - w + 1
			mk := make([]byte, lq*(tk-c0))
			for li := range lq {
				pos := tk - lq + li
				for j := range tk - c0 {
					if p := c0 + j; p > pos-w && p <= pos {
						mk[li*(tk-c0)+j] = 1
					}
				}
			}
			mask := tensor.FromBytesOn(be, mk, []int{lq, tk - c0}, tensor.Bool, false)
			kw, vw := tensor.SliceAxis(keys, 2, c0, tk), tensor.SliceAxis(values, 2, c0, tk)
			win := be.SDPATurbo(q, kw, vw, l, tensor.SDPAOptions{MaskKind: tensor.MaskArray, Mask: mask, KeyStart: c0})
			got = win.Float32s()
			tensor.Free(mask, kw, vw, win)
			for li := range lq {
				pos := tk - lq + li
				qi := tensor.SliceAxis(q, 2, li, li+1)
				ki, vi := tensor.SliceAxis(keys, 2, pos-w+1, pos+1), tensor.SliceAxis(values, 2, pos-w+1, pos+1)
				one := be.SDPATurbo(qi, ki, vi, l, tensor.SDPAOptions{KeyStart: pos - w + 1})
				alone := one.Float32s()
				for h := range hq {
					want := alone[h*d : (h+1)*d]
					row := got[(h*lq+li)*d : (h*lq+li+1)*d]
					if !bytes.Equal(f32bytes(row), f32bytes(want)) {
						t.Fatalf("window: row %d head %d: chunk %v…, alone %v…", li, h, row[:3], want[:3])
					}
				}
				tensor.Free(qi, ki, vi, one)
			}
		})
	}
}

func f32bytes(x []float32) []byte {
	out := make([]byte, 0, 4*len(x))
	for _, v := range x {
		u := math.Float32bits(v)
		out = append(out, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return out
}
