package model

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// randQuant makes random 4-bit packed weights [out, in] with bfloat16
// scales and biases of a realistic size: decode speed does not depend on
// the values, so no float weights are generated and quantized.
func randQuant(r *rand.Rand, out, in int, owned *[]*tensor.Array) (wq, s, b *tensor.Array) {
	raw := make([]byte, out*in/2)
	r.Read(raw)
	groups := out * in / 64
	sb := make([]byte, 2*groups)
	bb := make([]byte, 2*groups)
	for i := range groups {
		binary.LittleEndian.PutUint16(sb[2*i:], tensor.F32ToBF16(0.002+0.001*r.Float32()))
		binary.LittleEndian.PutUint16(bb[2*i:], tensor.F32ToBF16(-0.015-0.005*r.Float32()))
	}
	wq = tensor.FromBytes(raw, []int{out, in / 8}, tensor.Uint32)
	s = tensor.FromBytes(sb, []int{out, in / 64}, tensor.BFloat16)
	b = tensor.FromBytes(bb, []int{out, in / 64}, tensor.BFloat16)
	*owned = append(*owned, wq, s, b)
	return wq, s, b
}

// benchLlama1B builds a 1B-shaped 4-bit Llama (hidden 2048, 16 layers, GQA
// 32/8, FFN 8192, vocab 32000) in memory and returns it with the bytes
// one decode step reads (every weight once, except the embedding, of
// which one row is read) and the arrays to free.
func benchLlama1B() (*Llama, int, []*tensor.Array) {
	const hidden, layers, heads, kvHeads, ffn, vocab, headDim = 2048, 16, 32, 8, 8192, 32000, 64
	r := rand.New(rand.NewSource(1))
	var owned []*tensor.Array
	bytes := 0
	lin := func(out, in int) *Linear {
		wq, s, b := randQuant(r, out, in, &owned)
		bytes += wq.NBytes() + s.NBytes() + b.NBytes()
		return &Linear{Weight: wq, Scales: s, Biases: b, QuantSpec: tensor.QuantSpec{GroupSize: 64, Bits: 4}}
	}
	norm := func() *RMSNorm {
		w := tensor.Ones([]int{hidden}, tensor.BFloat16)
		owned = append(owned, w)
		bytes += w.NBytes()
		return &RMSNorm{Weight: w, Eps: 1e-5}
	}
	cfg := llamaConfig{ModelType: "llama", Hidden: hidden, Layers: layers, Intermediate: ffn, Heads: heads, KVHeads: kvHeads, HeadDim: headDim, Vocab: vocab, Eps: 1e-5}
	ew, es, eb := randQuant(r, vocab, hidden, &owned)
	m := &Llama{cfg: cfg, Embed: &Embedding{Weight: ew, Scales: es, Biases: eb, QuantSpec: tensor.QuantSpec{GroupSize: 64, Bits: 4}, DType: tensor.BFloat16}}
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
	return m, bytes, owned
}

// BenchmarkDecodeLlama1B4bit measures greedy decode tokens/s of a random
// 1B-shaped 4-bit Llama after a 32-token prompt, against the roofline
// (bytes of weights ÷ read bandwidth).
func BenchmarkDecodeLlama1B4bit(b *testing.B) {
	m, wbytes, owned := benchLlama1B()
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
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i * 7)
	}
	tok := step(prompt)
	gbs := tensortest.ReadBandwidth(3) // gemma4_bench_test.go: tensor/cpu's BenchmarkCopyBandwidth measurement
	b.ResetTimer()
	for b.Loop() {
		tok = step([]int32{tok})
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	roof := gbs * 1e9 / float64(wbytes)
	b.ReportMetric(1/sec, "tok/s")
	b.ReportMetric(roof, "roofline-tok/s")
	b.ReportMetric(float64(wbytes)/sec/1e9, "GB/s")
	b.ReportMetric(gbs, "read-GB/s")
	b.ReportMetric(1/sec/roof, "ratio")
	b.Logf("weights read per token: %.3f GB", float64(wbytes)/1e9)
}
