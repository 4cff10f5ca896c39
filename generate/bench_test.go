package generate_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// trivialModel's forward pass is a constant: what remains of a step is
// the loop's own work (input arrays, scopes, the sampler's argmax and the
// read-back).
type trivialModel struct{ vocab int }

func (m trivialModel) Forward(ids *tensor.Array, _ []kv.Cache) (*tensor.Array, error) {
	return tensor.Zeros([]int{1, ids.Dim(1), 8}, tensor.Float32), nil
}
func (m trivialModel) Logits(h *tensor.Array) (*tensor.Array, error) {
	return tensor.Full([]int{1, h.Dim(1), m.vocab}, 0.5, tensor.Float32), nil
}
func (m trivialModel) MakeCaches() []kv.Cache { return []kv.Cache{kv.NewKVCache()} }
func (m trivialModel) VocabSize() int         { return m.vocab }

// BenchmarkHostOverhead measures the loop's cost per token with a trivial
// forward pass, against a baseline measured in the same run: the same
// forward, logits and sampler step done by hand without the loop.
func BenchmarkHostOverhead(b *testing.B) {
	m := trivialModel{vocab: 64}
	// Baseline: the unavoidable work of a step, by hand (best of two
	// passes, one before and one after the loop, as the machine drifts).
	baseline := func() float64 {
		smp, err := sampler.New(sampler.Params{}, m.vocab)
		if err != nil {
			b.Fatal(err)
		}
		defer smp.Free()
		const n = 20000
		t0 := time.Now()
		for range n {
			sc := tensor.NewScope()
			in := tensor.FromInt32([]int32{1}, []int{1, 1})
			h, _ := m.Forward(in, nil)
			l, _ := m.Logits(h)
			st, _ := smp.Step(tensor.Reshape(l, 1, m.vocab), nil, nil)
			tensor.Detach(st.Arrays()...)
			sc.Close()
			st.Results()
		}
		return float64(time.Since(t0).Nanoseconds()) / n
	}
	baseNs := baseline()
	b.ResetTimer()
	s, err := generate.Generate(context.Background(), m, []int32{1, 2, 3}, &generate.Options{MaxTokens: b.N})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, err := range s.Tokens() {
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.StopTimer()
	s.Close()
	per := float64(b.Elapsed().Nanoseconds()) / float64(n)
	baseNs = min(baseNs, baseline())
	b.ReportMetric(per/1000, "µs/token")
	b.ReportMetric(baseNs/1000, "baseline-µs/token")
	b.ReportMetric((per-baseNs)/1000, "overhead-µs/token")
}

// BenchmarkDecode1B4bit measures decode tokens/s through Generate of a
// random 1B-shaped 4-bit Llama (hidden 2048, 16 layers, GQA 32/8, FFN
// 8192, vocab 32000) on the CPU backend, as a fraction of the roofline
// (bytes of weights a step reads ÷ read bandwidth measured in the run).
func BenchmarkDecode1B4bit(b *testing.B) { benchDecode1B(b, 4) }

// BenchmarkDecode1B8bit is BenchmarkDecode1B4bit with the weights in 8
// bits (twice the bytes a step reads).
func BenchmarkDecode1B8bit(b *testing.B) { benchDecode1B(b, 8) }

// benchDecode1B is BenchmarkDecode1B4bit at the given bits.
func benchDecode1B(b *testing.B, bits int) {
	dir, stepBytes := writeLlama(b, llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}, bits)
	lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	m := generate.Wrap(lm, lm.Info().Vocab)
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i*7 + 3)
	}
	gbs := tensortest.ReadBandwidth(3)
	b.ResetTimer()
	s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	for _, err := range s.Tokens() {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	st := s.Stats()
	s.Close()
	roof := gbs * 1e9 / float64(stepBytes)
	b.ReportMetric(st.DecodeTPS, "tok/s")
	b.ReportMetric(roof, "roofline-tok/s")
	b.ReportMetric(st.DecodeTPS/roof, "ratio")
	b.ReportMetric(st.PrefillTPS, "prefill-tok/s")
	b.ReportMetric(gbs, "read-GB/s")
	b.Logf("%d decode tokens; weights read per token %.3f GB", st.GeneratedTokens-1, float64(stepBytes)/1e9)
}

// BenchmarkPrefill1B4bit measures prompt processing tokens/s through
// Generate of BenchmarkDecode1B4bit's random 1B-shaped 4-bit Llama: a
// 256-token prompt (bfloat16 activations, so the quantized Linear layers
// run as batch-256 products) and one generated token per iteration.
// tok/cpu-s is prompt tokens per CPU-second (both cores' time summed).
func BenchmarkPrefill1B4bit(b *testing.B) {
	dir, _ := writeLlama(b, llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}, 4)
	lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	m := generate.Wrap(lm, lm.Info().Vocab)
	prompt := make([]int32, 256)
	for i := range prompt {
		prompt[i] = int32(i*7 + 3)
	}
	var tps float64
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		c0 := processCPU()
		s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: 1})
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range s.Tokens() {
			if err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU() - c0
		tps += s.Stats().PrefillTPS
		s.Close()
	}
	b.ReportMetric(tps/float64(b.N), "prefill-tok/s")
	// tokens per second of CPU time (prefill and one decode step): on a
	// machine shared with other work this tracks the kernels' speed where
	// wall time can't
	b.ReportMetric(float64(len(prompt)*b.N)/cpu.Seconds(), "tok/cpu-s")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
