package kv

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// seq is a host-side record of every key, value and query written, to
// compute reference attention over the full history.
type seq struct {
	b, hq, hkv, d, dv int
	keys, values      [][]float32 // per token: [b][hkv][d] flattened
	dqKeys, dqValues  [][]float32 // the same after quantization (when quant is set)
	// quant, when set, records keys and values as they come back from
	// affine quantization (group size, bits): the exact input of a
	// quantized cache's attention.
	quant *QuantSpec
	// kmean and vmean, when set, are per-(head, channel) offsets added to
	// every token: real keys and values have them, and they make the
	// attention output keep its size as the context grows.
	kmean, vmean []float32
}

func newSeq(b, hq, hkv, d, dv int) *seq { return &seq{b: b, hq: hq, hkv: hkv, d: d, dv: dv} }

func randVals(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// chunk makes n new tokens: arrays [B, H, n, D] plus their per-token host copy.
func (s *seq) chunk(r *rand.Rand, n int) (k, v, q *tensor.Array, qh []float32) {
	kh := randVals(r, s.b*s.hkv*n*s.d)
	vh := randVals(r, s.b*s.hkv*n*s.dv)
	qh = randVals(r, s.b*s.hq*n*s.d)
	if s.kmean != nil {
		for i := range kh {
			kh[i] = s.kmean[(i/(n*s.d))%s.hkv*s.d+i%s.d] + 0.5*kh[i]
		}
		for i := range vh {
			vh[i] = s.vmean[(i/(n*s.dv))%s.hkv*s.dv+i%s.dv] + 0.5*vh[i]
		}
	}
	k = tensor.FromFloat32(kh, []int{s.b, s.hkv, n, s.d}, tensor.Float32)
	v = tensor.FromFloat32(vh, []int{s.b, s.hkv, n, s.dv}, tensor.Float32)
	q = tensor.FromFloat32(qh, []int{s.b, s.hq, n, s.d}, tensor.Float32)
	s.keys, s.values = s.record(s.keys, s.values, kh, vh, n)
	if s.quant != nil {
		s.dqKeys, s.dqValues = s.record(s.dqKeys, s.dqValues, roundTrip(k, *s.quant), roundTrip(v, *s.quant), n)
	}
	return
}

// record appends n tokens of [B, H, n, D] host data to per-token histories.
func (s *seq) record(ks, vs [][]float32, kh, vh []float32, n int) ([][]float32, [][]float32) {
	for t := range n {
		kt := make([]float32, 0, s.b*s.hkv*s.d)
		vt := make([]float32, 0, s.b*s.hkv*s.dv)
		for bi := range s.b {
			for h := range s.hkv {
				base := ((bi*s.hkv+h)*n + t)
				kt = append(kt, kh[base*s.d:(base+1)*s.d]...)
				vt = append(vt, vh[base*s.dv:(base+1)*s.dv]...)
			}
		}
		ks = append(ks, kt)
		vs = append(vs, vt)
	}
	return ks, vs
}

// roundTrip is a's values after quantization and dequantization.
func roundTrip(a *tensor.Array, q QuantSpec) []float32 {
	w, sc, b := tensor.Quantize(a, q.GroupSize, q.Bits)
	d := tensor.Dequantize(w, sc, b, q.GroupSize, q.Bits, tensor.Float32)
	defer tensor.Free(w, sc, b, d)
	return d.Float32s()
}

// withMeans gives the sequence per-channel key and value offsets.
func (s *seq) withMeans(r *rand.Rand) *seq {
	s.kmean = randVals(r, s.hkv*s.d)
	s.vmean = randVals(r, s.hkv*s.dv)
	return s
}

// reference is attention of the last n queries qh ([B, Hq, n, D]) over the
// full history, query at absolute position p seeing keys in
// (p-window, p] (window 0: all of [0, p]), in float64.
func (s *seq) reference(qh []float32, n, window int, scale float64, dequantized bool) []float64 {
	keys, values := s.keys, s.values
	if dequantized {
		keys, values = s.dqKeys, s.dqValues
	}
	total := len(keys)
	rep := s.hq / s.hkv
	out := make([]float64, s.b*s.hq*n*s.dv)
	scores := make([]float64, total)
	for bi := range s.b {
		for h := range s.hq {
			kh := h / rep
			for i := range n {
				p := total - n + i
				lo := 0
				if window > 0 {
					lo = max(0, p-window+1)
				}
				q := qh[((bi*s.hq+h)*n+i)*s.d:][:s.d]
				m := math.Inf(-1)
				for r := lo; r <= p; r++ {
					k := keys[r][(bi*s.hkv+kh)*s.d:][:s.d]
					dot := 0.0
					for j := range s.d {
						dot += float64(q[j]) * float64(k[j])
					}
					scores[r] = dot * scale
					m = max(m, scores[r])
				}
				sum := 0.0
				for r := lo; r <= p; r++ {
					scores[r] = math.Exp(scores[r] - m)
					sum += scores[r]
				}
				o := out[((bi*s.hq+h)*n+i)*s.dv:][:s.dv]
				for r := lo; r <= p; r++ {
					v := values[r][(bi*s.hkv+kh)*s.dv:][:s.dv]
					w := scores[r] / sum
					for j := range s.dv {
						o[j] += w * float64(v[j])
					}
				}
			}
		}
	}
	return out
}

// relErr is ‖got−want‖/‖want‖.
func relErr(got []float32, want []float64) float64 {
	num, den := 0.0, 0.0
	for i := range want {
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	return math.Sqrt(num / den)
}

// maxAbsErr is max |got−want|.
func maxAbsErr(got []float32, want []float64) float64 {
	m := 0.0
	for i := range want {
		m = max(m, math.Abs(float64(got[i])-want[i]))
	}
	return m
}

// attend runs one write through a cache the way a model layer does: mask
// for n tokens, update, attention. It returns the attention output.
func attend(c Cache, k, v, q *tensor.Array, window int) []float32 {
	n := k.Dim(2)
	m := c.MakeMask(n, window, false)
	defer m.Free()
	kv := c.UpdateAndFetch(k, v)
	out := Attention(q, kv, m.Options(0))
	defer out.Free()
	return out.Float32s()
}

// sameBytes reports whether two arrays hold identical shapes and bytes.
func sameBytes(a, b *tensor.Array) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Shape()) != len(b.Shape()) || a.DType() != b.DType() {
		return false
	}
	for i := range a.Shape() {
		if a.Dim(i) != b.Dim(i) {
			return false
		}
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}

// sameState compares two states field by field and byte by byte.
func sameState(t *testing.T, a, b State) {
	t.Helper()
	if a.Kind != b.Kind || a.Offset != b.Offset || a.Idx != b.Idx || a.MaxSize != b.MaxSize ||
		a.Keep != b.Keep || a.GroupSize != b.GroupSize || a.Bits != b.Bits || len(a.Arrays) != len(b.Arrays) {
		t.Fatalf("states differ: %+v vs %+v", a, b)
	}
	for i := range a.Arrays {
		if !sameBytes(a.Arrays[i], b.Arrays[i]) {
			t.Fatalf("state array %d differs: %v vs %v", i, a.Arrays[i], b.Arrays[i])
		}
	}
}

func freeAll(arrs ...*tensor.Array) { tensor.Free(arrs...) }
