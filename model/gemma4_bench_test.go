package model

import (
	"math"
	"strconv"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// gemma4Bench1B is a 1B-shaped Gemma 4 (about the size of the random 4-bit
// Llama the brief benchmarks): 16 layers of width 2048, 8 heads of 256
// (512 on full layers) over one KV head, FFN 8192, a 32k vocabulary tied
// to the head, 5:1 sliding:full layers with a 512 window.
func gemma4Bench1B() *gemma4Config {
	cfg := defaultGemma4Config()
	cfg.Vocab, cfg.Hidden, cfg.Intermediate, cfg.Layers = 32768, 2048, 8192, 16
	cfg.Heads, cfg.KVHeads, cfg.HeadDim = 8, 1, 256
	zero := 0
	cfg.PerLayerHidden = &zero
	softcap := 30.0
	cfg.Softcap = &softcap
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &cfg
}

// randomGemma4 builds cfg's model in memory with random affine-quantized
// weights (random codes; scales sized for unit gain; bfloat16 scales,
// biases and norms) and returns it with the arrays to free and the bytes
// one decode step reads (every weight once; the embedding as the head).
func randomGemma4(cfg *gemma4Config, bits int) (m *Gemma4, owned []*tensor.Array, weightBytes int) {
	const group = 64
	key := tensor.Key(1)
	owned = append(owned, key)
	keep := func(a *tensor.Array) *tensor.Array {
		tensor.Detach(a)
		owned = append(owned, a)
		return a
	}
	n := uint64(0)
	packed := func(out, in int) (wq, s, b *tensor.Array) {
		n++
		k := keep(tensor.Key(n))
		wq = keep(tensor.RandomBits(k, out, in*bits/32))
		levels := float64(int(1) << bits)
		scale := 1 / (math.Sqrt(float64(in)) * levels / math.Sqrt(12))
		s = keep(tensor.Full([]int{out, in / group}, scale, tensor.BFloat16))
		b = keep(tensor.Full([]int{out, in / group}, -scale*(levels-1)/2, tensor.BFloat16))
		weightBytes += wq.NBytes() + s.NBytes() + b.NBytes()
		return wq, s, b
	}
	linear := func(in, out int) *Linear {
		wq, s, b := packed(out, in)
		return &Linear{Weight: wq, Scales: s, Biases: b, QuantSpec: tensor.QuantSpec{GroupSize: group, Bits: bits}}
	}
	norm := func(d int) *RMSNorm {
		w := keep(tensor.Full([]int{d}, 1, tensor.BFloat16))
		weightBytes += w.NBytes()
		return &RMSNorm{Weight: w, Eps: cfg.Eps}
	}
	d := cfg.Hidden
	m = &Gemma4{cfg: cfg, eos: []int{1}, dtype: tensor.BFloat16, embedScale: roundTo(math.Sqrt(float64(d)), tensor.BFloat16)}
	wq, s, b := packed(cfg.Vocab, d)
	m.Embed = &Embedding{Weight: wq, Scales: s, Biases: b, QuantSpec: tensor.QuantSpec{GroupSize: group, Bits: bits}, DType: tensor.BFloat16}
	ropes := map[string]*Rope{}
	for i := range cfg.Layers {
		spec := cfg.layer(i)
		hd := spec.HeadDim
		key := spec.Type + "/" + strconv.Itoa(hd)
		if ropes[key] == nil {
			f, err := gemma4RopeFreqs(tensor.Default(), cfg.RopeParameters[spec.Type], hd)
			if err != nil {
				panic(err)
			}
			ropes[key] = &Rope{Dims: hd, Scale: 1, Freqs: keep(f)}
		}
		blk := &gemma4Block{
			spec: spec, heads: cfg.Heads, attnScale: 1, activation: tensor.GeluApprox, Rope: ropes[key],
			InNorm: norm(d), PostAttnNorm: norm(d), PreFFNorm: norm(d), PostFFNorm: norm(d),
			Q: linear(d, cfg.Heads*hd), QNorm: norm(hd), O: linear(cfg.Heads*hd, d),
			K: linear(d, spec.KVHeads*hd), V: linear(d, spec.KVHeads*hd), KNorm: norm(hd), VNorm: &RMSNorm{Eps: cfg.Eps},
			MLP: &MLP{Gate: linear(d, spec.MLPWidth), Up: linear(d, spec.MLPWidth), Down: linear(spec.MLPWidth, d), Act: tensor.GeluApprox},
		}
		if spec.Sliding {
			blk.window = cfg.SlidingWindow
		}
		m.Blocks = append(m.Blocks, blk)
	}
	m.Norm = norm(d)
	m.Head = &TiedHead{Embedding: m.Embed}
	return m, owned, weightBytes
}

// BenchmarkGemma4Decode1B4Bit measures batch-1 decode of a random 4-bit
// 1B-shaped Gemma 4 on the default backend after a 32-token prefill, and
// reports it against the roofline measured in the same run: weight bytes
// read per token ÷ read bandwidth.
func BenchmarkGemma4Decode1B4Bit(b *testing.B) {
	cfg := gemma4Bench1B()
	m, owned, wb := randomGemma4(cfg, 4)
	defer tensor.Free(owned...)
	caches := m.MakeCaches()
	defer FreeCaches(caches)
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(3 + 97*i%cfg.Vocab)
	}
	next := func(ids []int32) int32 {
		sc := tensor.NewScope()
		defer sc.Close()
		h := m.Forward(idsArray(ids), caches, nil)
		last := tensor.SliceAxis(h, 1, len(ids)-1, len(ids))
		id := tensor.AsType(tensor.Argmax(m.Logits(last), -1, false), tensor.Int32)
		raw := id.Bytes()
		return int32(uint32(raw[0]) | uint32(raw[1])<<8 | uint32(raw[2])<<16 | uint32(raw[3])<<24)
	}
	tok := next(prompt)
	bw := tensortest.ReadBandwidth(5)
	b.ResetTimer()
	for b.Loop() {
		tok = next([]int32{tok})
	}
	b.StopTimer()
	tps := float64(b.N) / b.Elapsed().Seconds()
	roof := bw * 1e9 / float64(wb)
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(float64(wb)/1e9, "GB-weights")
	b.ReportMetric(bw, "read-GB/s")
	b.ReportMetric(roof, "roofline-tok/s")
	b.ReportMetric(tps/roof, "of-roofline")
}

// BenchmarkGemma4Prefill1B4Bit measures a 256-token prefill of the random
// 4-bit 1B-shaped Gemma 4, without and with KV-sharing layers (the last 8
// of 16 reading earlier layers' keys and values, as Gemma 4's E models'
// last layers do), computing every position's hidden state ("all") or the
// last position's alone ("last": ForwardOptions.Outputs, what a prompt's
// last chunk asks for; the KV-sharing layers then run one position).
func BenchmarkGemma4Prefill1B4Bit(b *testing.B) {
	const t = 256
	for _, shared := range []int{0, 8} {
		cfg := gemma4Bench1B()
		cfg.KVSharedLayers = shared
		if err := cfg.validate(); err != nil {
			b.Fatal(err)
		}
		m, owned, _ := randomGemma4(cfg, 4)
		prompt := make([]int32, t)
		for i := range prompt {
			prompt[i] = int32(3 + 97*i%cfg.Vocab)
		}
		for _, mode := range []string{"all", "last"} {
			b.Run("shared="+strconv.Itoa(shared)+"/"+mode, func(b *testing.B) {
				var opts *ForwardOptions
				if mode == "last" {
					opts = &ForwardOptions{Outputs: []int32{t - 1}}
				}
				for b.Loop() {
					caches := m.MakeCaches()
					h := m.Forward(idsArray(prompt), caches, opts)
					tensor.Eval(h)
					h.Free()
					FreeCaches(caches)
				}
				b.ReportMetric(float64(t*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
		tensor.Free(owned...)
	}
}
