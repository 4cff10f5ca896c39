package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkQ8Kern runs the int8 kernels alone on one cache-resident
// 16-row block (K = 2048, group 64): GOP/s of multiply-adds per core,
// against BenchmarkPeak's dpbusd row.
func BenchmarkQ8Kern(b *testing.B) {
	if !q8Kernels {
		b.Skip("no AVX512_VNNI")
	}
	const k, gs = 2048, 64
	n := 64
	if s := os.Getenv("Q8N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	r := rand.New(rand.NewPCG(3, 3))
	for _, bits := range []int{4, 8} {
		wq, sc, bi := tensor.Quantize(tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16), gs, bits)
		q := loadQ(wq, sc, bi, gs, bits)
		p := q8Build(q.m)
		ldx := q8RowBytes(k, gs)
		xq := make([]byte, 8*ldx)
		xv := randF32(r, 8*k)
		for m := range 8 {
			q8QuantizeRef(xq[m*ldx:], xv[m*k:(m+1)*k], gs)
		}
		var out [8 * 16]float32
		for _, rows := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("b%d_rows%d", bits, rows), func(b *testing.B) {
				for b.Loop() {
					for blk := range p.nblk {
						q8Kernel(bits, rows, p.half, &p.buf.data[blk*p.blk], &xq[0], ldx, k/gs, gs/8, &out[0], 64)
					}
				}
				macs := float64(b.N) * float64(p.nblk*16*k*rows)
				b.ReportMetric(2*macs/b.Elapsed().Seconds()/1e9, "GOP/s")
				b.ReportMetric(float64(b.N)*float64(p.nblk*p.blk)/b.Elapsed().Seconds()/1e9, "wGB/s")
			})
		}
		p.buf.drop()
		q.release()
		tensor.Free(wq, sc, bi)
	}
}
