package model

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// benchRand makes random weights for the benchmarks (no checkpoint: the
// real towers' shapes with uniform weights of about 1/√fan-in).
type benchRand struct {
	seed uint64
	dt   tensor.DType
}

func (r *benchRand) w(shape ...int) *tensor.Array {
	r.seed++
	bound := 1 / math.Sqrt(float64(shape[len(shape)-1]))
	a := tensor.Uniform(tensor.Key(r.seed), shape, -bound, bound, r.dt)
	tensor.Eval(a)
	return a
}

func (r *benchRand) lin(out, in int) *clipLinear {
	return &clipLinear{L: &Linear{Weight: r.w(out, in)}, inMin: math.Inf(-1), inMax: math.Inf(1), outMin: math.Inf(-1), outMax: math.Inf(1)}
}

func (r *benchRand) norm(n int) *RMSNorm {
	return &RMSNorm{Weight: tensor.Full([]int{n}, 1, r.dt), Eps: 1e-6}
}

// e4bVision is Gemma 4 e4b's vision tower shape (SigLIP-style: 16 layers
// of 768, 12 heads of 64, MLP 3072, 16-pixel patches, 3×3 pooling) with
// random weights, projecting to a 2560-wide text model.
func e4bVision(dt tensor.DType) *Gemma4Vision {
	cfg := &gemma4VisionConfig{Hidden: 768, Intermediate: 3072, Layers: 16, Heads: 12, KVHeads: 12, HeadDim: 64,
		Activation: "gelu_pytorch_tanh", Eps: 1e-6, Pool: 3, Patch: 16, PosEmbed: 10240}
	r := &benchRand{dt: dt}
	d, hd := cfg.Hidden, cfg.HeadDim
	v := &Gemma4Vision{cfg: cfg, be: tensor.Default(), dtype: dt, act: tensor.GeluApprox,
		PatchProj: &Linear{Weight: r.w(d, 3*16*16)}, PosX: r.w(cfg.PosEmbed, d), PosY: r.w(cfg.PosEmbed, d),
		EmbedNorm: &RMSNorm{Eps: 1e-6}, EmbedProj: &Linear{Weight: r.w(2560, d)}}
	for range cfg.Layers {
		v.Layers = append(v.Layers, &gemma4VisionLayer{
			InNorm: r.norm(d), PostAttnNorm: r.norm(d), PreFFNorm: r.norm(d), PostFFNorm: r.norm(d),
			Q: r.lin(cfg.Heads*hd, d), K: r.lin(cfg.KVHeads*hd, d), V: r.lin(cfg.KVHeads*hd, d), O: r.lin(d, cfg.Heads*hd),
			QNorm: r.norm(hd), KNorm: r.norm(hd), VNorm: &RMSNorm{Eps: 1e-6},
			Gate: r.lin(cfg.Intermediate, d), Up: r.lin(cfg.Intermediate, d), Down: r.lin(d, cfg.Intermediate),
		})
	}
	for i := 0; i < hd/2; i += 2 {
		v.invFreq = append(v.invFreq, float32(1/math.Pow(100, float64(i)/float64(hd/2))))
	}
	return v
}

// BenchmarkGemma4VisionE4B: an 896×896 image through Gemma4ImageProcessor
// (resized to 768×768: 2304 patches, 256 soft tokens) and the e4b-shaped
// tower and projection, with float32 and bf16 weights. Reports
// preprocess-ms and tower-ms.
func BenchmarkGemma4VisionE4B(b *testing.B) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		b.Run(dt.String(), func(b *testing.B) { benchVision(b, dt) })
	}
}

func benchVision(b *testing.B, dt tensor.DType) {
	v := e4bVision(dt)
	rng := rand.New(rand.NewPCG(1, 2))
	img := &media.RGB{W: 896, H: 896, Pix: make([]uint8, 896*896*3)}
	for i := range img.Pix {
		img.Pix[i] = uint8(rng.IntN(256))
	}
	cfg := media.DefaultGemma4ImageConfig()
	var pre, tow time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := media.Gemma4Preprocess(img, cfg)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sc := tensor.NewScope()
		out, err := v.Tower(p)
		if err != nil {
			b.Fatal(err)
		}
		emb, err := v.Project(out)
		if err != nil {
			b.Fatal(err)
		}
		tensor.Eval(emb)
		if emb.Dim(0) != 256 {
			b.Fatalf("%d soft tokens", emb.Dim(0))
		}
		sc.Close()
		pre += t1.Sub(t0)
		tow += time.Since(t1)
	}
	b.ReportMetric(float64(pre.Milliseconds())/float64(b.N), "preprocess-ms")
	b.ReportMetric(float64(tow.Milliseconds())/float64(b.N), "tower-ms")
}

// e4bAudio is Gemma 4 e4b's audio tower shape (a 12-layer Conformer of
// 1024 with 8 heads, subsampling channels 128 and 32, output 1536) with
// random float32 weights, projecting to a 2560-wide text model.
func e4bAudio() *Gemma4Audio {
	cfg := &gemma4AudioConfig{Hidden: 1024, Layers: 12, Heads: 8, Activation: "silu", Channels: []int{128, 32}, ConvKernel: 5,
		Residual: 0.5, Chunk: 12, Left: 13, LogitCap: 50, Invalid: -1e9, Eps: 1e-6, GradClip: 1e10, OutputDims: 1536}
	r := &benchRand{dt: tensor.Float32}
	d := cfg.Hidden
	a := &Gemma4Audio{cfg: cfg, be: tensor.Default(), Norm0: r.norm(128).Weight, Norm1: r.norm(32).Weight,
		InputProj: &Linear{Weight: r.w(d, 32*32)}, OutputProj: &Linear{Weight: r.w(1536, d), Bias: tensor.Zeros([]int{1536}, tensor.Float32)},
		EmbedNorm: &RMSNorm{Eps: 1e-6}, EmbedProj: &Linear{Weight: r.w(2560, 1536)}, freqOut: 32}
	for k := range 9 {
		a.Conv0[k] = r.w(1, 128)
		a.Conv1[k] = r.w(128, 32)
	}
	ff := func() *gemma4AudioFF {
		return &gemma4AudioFF{Pre: r.norm(d), Post: r.norm(d), Up: r.lin(4*d, d), Down: r.lin(d, 4*d)}
	}
	for range cfg.Layers {
		l := &gemma4AudioLayer{FF1: ff(), FF2: ff(), Q: r.lin(d, d), K: r.lin(d, d), V: r.lin(d, d), Post: r.lin(d, d),
			RelK: &Linear{Weight: r.w(d, d)}, QScale: tensor.Full([]int{d / cfg.Heads}, 0.1, tensor.Float32),
			NormPreAttn: r.norm(d), NormPostAttn: r.norm(d), NormOut: r.norm(d), ConvPre: r.norm(d), ConvNorm: r.norm(d),
			Start: r.lin(2*d, d), End: r.lin(d, d)}
		for range cfg.ConvKernel {
			l.Depthwise = append(l.Depthwise, r.w(1, d))
		}
		a.Layers = append(a.Layers, l)
	}
	rows := (cfg.Chunk+cfg.Left-1)/2 + 1
	a.relPos = r.w(rows, d)
	return a
}

// BenchmarkGemma4AudioE4B: 10 s of 16 kHz audio through the feature
// extractor and the e4b-shaped audio tower and projection. Reports
// features-ms and tower-ms per second of audio.
func BenchmarkGemma4AudioE4B(b *testing.B) {
	a := e4bAudio()
	const secs = 10
	x := make([]float32, secs*16000)
	for i := range x {
		t := float64(i) / 16000
		x[i] = float32(0.4 * math.Sin(2*math.Pi*(200+300*t)*t))
	}
	cfg := media.DefaultGemma4AudioConfig()
	var feat, tow time.Duration
	for b.Loop() {
		t0 := time.Now()
		f, err := media.Gemma4LogMel(x, cfg)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		sc := tensor.NewScope()
		out, err := a.Tower(f)
		if err != nil {
			b.Fatal(err)
		}
		emb, err := a.Project(out)
		if err != nil {
			b.Fatal(err)
		}
		tensor.Eval(emb)
		sc.Close()
		feat += t1.Sub(t0)
		tow += time.Since(t1)
	}
	b.ReportMetric(float64(feat.Microseconds())/1000/float64(b.N)/secs, "features-ms/s")
	b.ReportMetric(float64(tow.Microseconds())/1000/float64(b.N)/secs, "tower-ms/s")
}
