package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// refRoPE is the float64 reference for x [B, H, T, D].
func refRoPE(x []float32, b, h, t, d int, o tensor.RoPEOptions, offs []int, freqs []float64) []float64 {
	out := make([]float64, len(x))
	half := o.Dims / 2
	scale := float64(o.Scale)
	for bi := range b {
		off := offs[0]
		if len(offs) > 1 {
			off = offs[bi]
		}
		for hi := range h {
			for ti := range t {
				base := ((bi*h+hi)*t + ti) * d
				for i := range d {
					out[base+i] = float64(x[base+i])
				}
				pos := float64(off+ti) * scale
				for i := range half {
					var th float64
					if freqs != nil {
						th = pos / freqs[i]
					} else {
						th = pos * math.Pow(float64(o.Base), -2*float64(i)/float64(o.Dims))
					}
					j1, j2 := i, i+half
					if o.Traditional {
						j1, j2 = 2*i, 2*i+1
					}
					x1, x2 := float64(x[base+j1]), float64(x[base+j2])
					out[base+j1] = x1*math.Cos(th) - x2*math.Sin(th)
					out[base+j2] = x1*math.Sin(th) + x2*math.Cos(th)
				}
			}
		}
	}
	return out
}

func TestRoPE(t *testing.T) {
	fzNoLeak(t, func() {
		b, h, tt, d := 2, 3, 5, 16
		xv := fzRand(b*h*tt*d, 31)
		x := tensor.FromFloat32(xv, []int{b, h, tt, d}, tensor.Float32)
		fq := []float64{1, 3, 10, 30, 100, 300}
		fq32 := make([]float32, len(fq))
		for i, f := range fq {
			fq32[i] = float32(f)
		}
		freqs := tensor.FromFloat32(fq32, []int{6}, tensor.Float32)
		offArr := tensor.FromInt32([]int32{7, 40}, []int{2})
		offScalar := tensor.FromInts([]int{9}, []int{}, tensor.Int64)
		for _, c := range []struct {
			name  string
			o     tensor.RoPEOptions
			offs  []int
			freqs []float64
		}{
			{"halves", tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: 3}, []int{3}, nil},
			{"traditional", tensor.RoPEOptions{Dims: d, Traditional: true, Base: 10000, Scale: 1, Offset: 3}, []int{3}, nil},
			{"partial", tensor.RoPEOptions{Dims: 8, Base: 500, Scale: 1, Offset: 100}, []int{100}, nil},
			{"partial traditional", tensor.RoPEOptions{Dims: 8, Traditional: true, Base: 500, Scale: 0.25}, []int{0}, nil},
			{"scale", tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 0.5, Offset: 11}, []int{11}, nil},
			{"freqs", tensor.RoPEOptions{Dims: 12, Freqs: freqs, Scale: 1, Offset: 2}, []int{2}, fq},
			{"offset array", tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, OffsetArr: offArr}, []int{7, 40}, nil},
			{"offset scalar array", tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: 1000, OffsetArr: offScalar}, []int{9}, nil},
		} {
			got := tensor.RoPE(x, c.o)
			fzClose(t, c.name, got.Float32s(), refRoPE(xv, b, h, tt, d, c.o, c.offs, c.freqs), 2e-6, 2e-5)
			got.Free()
		}
		// bf16 follows MLX's per-step rounding: within a couple of bf16 ulps
		xb := tensor.FromFloat32(xv, []int{b, h, tt, d}, tensor.BFloat16)
		o := tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: 5}
		gb := tensor.RoPE(xb, o)
		if gb.DType() != tensor.BFloat16 {
			t.Errorf("dtype %s", gb.DType())
		}
		fzClose(t, "bf16", gb.Float32s(), refRoPE(fzRound(xv, tensor.BFloat16), b, h, tt, d, o, []int{5}, nil), 1e-2, 2.0/128)
		// [B, T, D] (3-D) with a per-batch offset, and a strided view
		x3 := tensor.FromFloat32(xv[:b*tt*d], []int{b, tt, d}, tensor.Float32)
		o3 := tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, OffsetArr: offArr}
		g3 := tensor.RoPE(x3, o3)
		fzClose(t, "3-D", g3.Float32s(), refRoPE(xv[:b*tt*d], b, 1, tt, d, o3, []int{7, 40}, nil), 2e-6, 2e-5)
		// [B, T, H, D] transposed to [B, H, T, D] without a copy
		xbt := tensor.FromFloat32(xv, []int{b, tt, h, d}, tensor.Float32)
		xv2 := tensor.Transpose(xbt, 0, 2, 1, 3)
		gv := tensor.RoPE(xv2, tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: 3})
		perm := make([]float32, len(xv))
		for bi := range b {
			for hi := range h {
				for ti := range tt {
					copy(perm[((bi*h+hi)*tt+ti)*d:][:d], xv[((bi*tt+ti)*h+hi)*d:][:d])
				}
			}
		}
		fzClose(t, "strided", gv.Float32s(), refRoPE(perm, b, h, tt, d, tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1}, []int{3}, nil), 2e-6, 2e-5)
		tensor.Free(x, freqs, offArr, offScalar, xb, gb, x3, g3, xbt, xv2, gv)
	})
}

// TestRoPESpans: spans rotated in one call give the bits of each span
// rotated alone (tensor.RoPE at the span's offset), in every dtype, both
// pair layouts and with given frequencies; the portable spans loop
// (a backend without SpanRoPE) gives them too.
func TestRoPESpans(t *testing.T) {
	fzNoLeak(t, func() {
		b, h, tt, d := 2, 3, 9, 16
		xv := fzRand(b*h*tt*d, 37)
		freqs := tensor.FromFloat32([]float32{1, 3, 10, 30, 100, 300}, []int{6}, tensor.Float32)
		defer freqs.Free()
		spans := []tensor.RoPESpan{{Start: 0, Len: 1, Offset: 40}, {Start: 1, Len: 4, Offset: 0}, {Start: 5, Len: 1, Offset: 3}, {Start: 6, Len: 3, Offset: 100}}
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16} {
			for _, o := range []tensor.RoPEOptions{
				{Dims: 16, Base: 10000, Scale: 1},
				{Dims: 12, Base: 500000, Scale: 0.5, Traditional: true},
				{Dims: 12, Scale: 1, Freqs: freqs},
			} {
				x := tensor.FromFloat32(xv, []int{b, h, tt, d}, dt)
				got := tensor.RoPESpans(x, o, spans)
				again := tensor.RoPESpans(x, o, spans) // the tables of the call before
				if !slices.Equal(got.Bytes(), again.Bytes()) {
					t.Errorf("%v %+v: a repeated call gives other bits", dt, o)
				}
				again.Free()
				for _, s := range spans {
					so := o
					so.Offset = s.Offset
					part := tensor.SliceAxis(x, 2, s.Start, s.Start+s.Len)
					want := tensor.RoPE(part, so)
					g := tensor.SliceAxis(got, 2, s.Start, s.Start+s.Len)
					if !slices.Equal(g.Bytes(), want.Bytes()) {
						t.Errorf("%v %+v span %+v: bits differ from the span alone", dt, o, s)
					}
					tensor.Free(part, want, g)
				}
				tensor.Free(x, got)
			}
		}
	})
}

// TestRoPEVectorRows: the AVX-512 rotation of row halves gives the bits of
// the loops, in float32 and bfloat16, for full and partial rotation, with
// special values among the inputs.
func TestRoPEVectorRows(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512: the loops are the only path")
	}
	fzNoLeak(t, func() {
		r := rand.New(rand.NewPCG(11, 11))
		for _, c := range []struct{ d, dims int }{{64, 64}, {128, 128}, {64, 32}, {256, 256}} {
			xv := ewSpecialBits(r, 2*4*5*c.d)
			for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
				x := tensor.FromFloat32(xv, []int{2, 4, 5, c.d}, dt)
				o := tensor.RoPEOptions{Dims: c.dims, Base: 10000, Scale: 1, Offset: 1000}
				got := tensor.RoPE(x, o)
				hasAVX512 = false
				want := tensor.RoPE(x, o)
				hasAVX512 = true
				g, w := got.Bytes(), want.Bytes()
				es := dt.Size()
				for i := 0; i < len(g); i += es {
					if !slices.Equal(g[i:i+es], w[i:i+es]) && !(ropeNaNAt(g[i:i+es]) && ropeNaNAt(w[i:i+es])) {
						t.Fatalf("%v d=%d dims=%d element %d: vector %x, loops %x", dt, c.d, c.dims, i/es, g[i:i+es], w[i:i+es])
					}
				}
				tensor.Free(x, got, want)
			}
		}
	})
}

// ropeNaNAt reports a NaN in the little-endian float32 or bfloat16 bytes
// b (a NaN's payload is the product's or the sum's operand order's).
func ropeNaNAt(b []byte) bool {
	if len(b) == 2 {
		return bf16NaN(uint16(b[0]) | uint16(b[1])<<8)
	}
	v := math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	return v != v
}
