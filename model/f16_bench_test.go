package model

import (
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// benchLlama1BDT is benchLlama1B with scales, biases, norm weights and
// activations in dt (float16 or bfloat16): the f16 activation path.
func benchLlama1BDT(dt tensor.DType) (*Llama, []*tensor.Array) {
	const hidden, layers, heads, kvHeads, ffn, vocab, headDim = 2048, 16, 32, 8, 8192, 32000, 64
	r := rand.New(rand.NewSource(1))
	var owned []*tensor.Array
	half := func(v float32) uint16 {
		if dt == tensor.Float16 {
			return tensor.F32ToF16(v)
		}
		return tensor.F32ToBF16(v)
	}
	quant := func(out, in int) (wq, s, b *tensor.Array) {
		raw := make([]byte, out*in/2)
		r.Read(raw)
		groups := out * in / 64
		sb, bb := make([]byte, 2*groups), make([]byte, 2*groups)
		for i := range groups {
			binary.LittleEndian.PutUint16(sb[2*i:], half(0.002+0.001*r.Float32()))
			binary.LittleEndian.PutUint16(bb[2*i:], half(-0.015-0.005*r.Float32()))
		}
		wq = tensor.FromBytes(raw, []int{out, in / 8}, tensor.Uint32)
		s = tensor.FromBytes(sb, []int{out, in / 64}, dt)
		b = tensor.FromBytes(bb, []int{out, in / 64}, dt)
		owned = append(owned, wq, s, b)
		return wq, s, b
	}
	lin := func(out, in int) *Linear {
		wq, s, b := quant(out, in)
		return &Linear{Weight: wq, Scales: s, Biases: b, QuantSpec: tensor.QuantSpec{GroupSize: 64, Bits: 4}}
	}
	norm := func() *RMSNorm {
		w := tensor.Ones([]int{hidden}, dt)
		owned = append(owned, w)
		return &RMSNorm{Weight: w, Eps: 1e-5}
	}
	cfg := llamaConfig{ModelType: "llama", Hidden: hidden, Layers: layers, Intermediate: ffn, Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Vocab: vocab, Eps: 1e-5}
	ew, es, eb := quant(vocab, hidden)
	m := &Llama{cfg: cfg, Embed: &Embedding{Weight: ew, Scales: es, Biases: eb, QuantSpec: tensor.QuantSpec{GroupSize: 64, Bits: 4}, DType: dt}}
	fr := llama3Freqs(RopeParams{Theta: 500000, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}, headDim)
	f32 := make([]float32, len(fr))
	for i, f := range fr {
		f32[i] = float32(f)
	}
	freqs := float32sOn(tensor.Default(), f32)
	owned = append(owned, freqs)
	rope := &Rope{Dims: headDim, Base: 500000, Scale: 1, Freqs: freqs}
	for range layers {
		m.Layers = append(m.Layers, &llamaBlock{
			InNorm: norm(), PostNorm: norm(),
			Attn: &Attention{Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Scale: float32(1 / math.Sqrt(headDim)), Rope: rope,
				Q: lin(heads*headDim, hidden), K: lin(kvHeads*headDim, hidden), V: lin(kvHeads*headDim, hidden), O: lin(hidden, heads*headDim)},
			MLP: &MLP{Gate: lin(ffn, hidden), Up: lin(ffn, hidden), Down: lin(hidden, ffn)},
		})
	}
	m.Norm = norm()
	m.Head = lin(vocab, hidden)
	tensor.Detach(owned...)
	return m, owned
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeF16vsBF16 decodes the random 1B-shaped 4-bit Llama with
// float16 and then bfloat16 activations (256-token context, 64 decode
// tokens each, alternating 3 rounds) and reports process CPU time per
// token of each and their ratio f16 ÷ bf16, which a shared machine's
// noise affects less than wall time. MLXGO_F16_ONLY=1 runs float16 alone
// (64 tokens), for a profile of that path.
func BenchmarkDecodeF16vsBF16(b *testing.B) {
	run := func(dt tensor.DType, n int) time.Duration {
		m, owned := benchLlama1BDT(dt)
		defer tensor.Free(owned...)
		caches := m.MakeCaches()
		defer func() {
			for _, c := range caches {
				c.Free()
			}
		}()
		step := func(ids []int32) int32 {
			sc := tensor.NewScope()
			defer sc.Close()
			in := int32s(tensor.Default(), ids)
			h := m.Forward(tensor.Reshape(in, 1, len(ids)), caches, nil)
			last := tensor.SliceAxis(h, 1, len(ids)-1, len(ids))
			am := tensor.Argmax(m.Logits(last), -1, false)
			return int32(binary.LittleEndian.Uint32(tensor.AsType(am, tensor.Int32).Bytes()))
		}
		prompt := make([]int32, 256)
		for i := range prompt {
			prompt[i] = int32(i * 7)
		}
		tok := step(prompt)
		t0 := cpuNow()
		for range n {
			tok = step([]int32{tok})
		}
		return (cpuNow() - t0) / time.Duration(n)
	}
	if os.Getenv("MLXGO_F16_ONLY") != "" { // one dtype, for a profile of it alone
		for b.Loop() {
			b.ReportMetric(float64(run(tensor.Float16, 64).Microseconds())/1e3, "f16-cpu-ms/tok")
		}
		return
	}
	for b.Loop() {
		var f16, bf16 time.Duration
		for range 3 {
			f16 += run(tensor.Float16, 32)
			bf16 += run(tensor.BFloat16, 32)
		}
		b.ReportMetric(float64(f16.Microseconds())/3e3, "f16-cpu-ms/tok")
		b.ReportMetric(float64(bf16.Microseconds())/3e3, "bf16-cpu-ms/tok")
		b.ReportMetric(float64(f16)/float64(bf16), "f16/bf16")
	}
}
