package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestTurboValueRowAVX2: the AVX2 decoding of 3-bit value rows gives the
// portable loop's floats, on random rows of every head dim.
func TestTurboValueRowAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this machine")
	}
	r := rand.New(rand.NewPCG(1, 2))
	levels := []float32{-2.15195, -1.34391, -0.75601, -0.24509, 0.24509, 0.75601, 1.34391, 2.15195}
	for _, d := range []int{64, 128, 256, 512} {
		row := make([]byte, d*3/8+2*(d/32))
		for i := range row {
			row[i] = byte(r.IntN(256))
		}
		for i := d * 3 / 8; i < len(row); i += 2 { // float16 scales near 1
			row[i], row[i+1] = byte(r.IntN(256)), 0x3c
		}
		got, want := make([]float32, d), make([]float32, d)
		turboValueRow(got, 32, row, d, 3, 32, levels)
		hasAVX2 = false
		turboValueRow(want, 32, row, d, 3, 32, levels)
		hasAVX2 = true
		if !slices.Equal(got, want) {
			t.Fatalf("head dim %d: AVX2 %v…, portable %v…", d, got[:8], want[:8])
		}
	}
}

// TestTurboKeysAVX2: attention with the AVX2 key dequantization gives the
// portable loop's bits (8-bit keys, runs of 8 keys and remainders, every
// head dim).
func TestTurboKeysAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this machine")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int{64, 128, 256} {
		const n = 45
		kb := d + 4*(d/32)
		rows := make([]byte, n*kb)
		for i := range rows {
			rows[i] = byte(r.IntN(256))
		}
		for j := range n { // float16 scales and biases of moderate size
			meta := rows[j*kb+d : (j+1)*kb]
			for i := 0; i < len(meta); i += 2 {
				meta[i], meta[i+1] = byte(r.IntN(256)), byte(0x20+r.IntN(8))
			}
		}
		sm := make([]float32, 16*(d/32))
		got, want := make([]float32, 64*d), make([]float32, 64*d)
		for j8 := 0; j8+8 <= n; j8 += 8 {
			for i := range 8 {
				meta := rows[(j8+i)*kb+d:]
				for gi := range d / 32 {
					sm[16*gi+i] = f16(meta[4*gi:])
					sm[16*gi+8+i] = f16(meta[4*gi+2:])
				}
			}
			turboKeys8Y(&got[j8/32*32*d+j8%32], &rows[j8*kb], kb, &sm[0], d)
			for i := range 8 {
				j := j8 + i
				meta := rows[j*kb+d:]
				for tt := range d {
					s, m := f16(meta[4*(tt/32):]), f16(meta[4*(tt/32)+2:])
					want[j/32*32*d+tt*32+j%32] = float32(float32(int8(rows[j*kb+tt]))*s) + m
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("head dim %d: AVX2 panel differs from the portable loop", d)
		}
	}
}

func f16(b []byte) float32 { return tensor.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }
