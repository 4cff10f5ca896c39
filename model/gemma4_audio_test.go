package model

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

func init() { mmAudioEmbeds = mmAudio }

func mmFeatures(t testing.TB, m *Gemma4Media, key string) *media.Gemma4Features {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(mmFixture, "media", key+".wav"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := media.DecodeWAV(data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := media.Gemma4LogMel(media.Resample(a, m.AudioConfig.SamplingRate).Samples, m.AudioConfig)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mmAudio(t testing.TB, m *Gemma4Media, key string) *tensor.Array {
	t.Helper()
	withEagerAudio(t, m)
	tower, err := m.Audio.Tower(mmFeatures(t, m, key))
	if err != nil {
		t.Fatal(err)
	}
	emb, err := m.Audio.Project(tower)
	if err != nil {
		t.Fatal(err)
	}
	return emb
}

// TestGemma4AudioTowerMatchesHF holds the audio tower (features from the
// Go feature extractor) and its projection to HF's.
func TestGemma4AudioTowerMatchesHF(t *testing.T) {
	g, _ := readMMGolden(t)
	m := loadMMMedia(t)
	if m.Audio == nil {
		t.Fatal("no audio tower loaded")
	}
	withEagerAudio(t, m)
	sc := tensor.NewScope()
	defer sc.Close()
	f := mmFeatures(t, m, "w1")
	tower, err := m.Audio.Tower(f)
	if err != nil {
		t.Fatal(err)
	}
	want := g["aud_w1_tower"]
	if tower.Dim(0) != want.Shape[0] || tower.Dim(1) != want.Shape[1] || f.SoftTokens() != want.Shape[0] {
		t.Fatalf("tower %v (%d soft tokens), HF %v", tower.Shape(), f.SoftTokens(), want.Shape)
	}
	closeTo(t, "tower", tower.Float32s(), want.f32(), 1e-5)
	emb, err := m.Audio.Project(tower)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "embed", emb.Float32s(), g["aud_w1_embed"].f32(), 1e-5)
}

func TestGemma4AudioSubsampleMatchesHF(t *testing.T) {
	g, _ := readMMGolden(t)
	m := loadMMMedia(t)
	sc := tensor.NewScope()
	defer sc.Close()
	var h *tensor.Array
	if err := tensor.Try(func() { h, _ = m.Audio.subsample(mmFeatures(t, m, "w1")) }); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "subsample", h.Float32s(), g["aud_w1_subsample"].f32(), 1e-5)
}

// blockedAudioAttention is Gemma4AudioAttention transcribed literally
// (on the host, float64): queries in chunks, each attending to its
// chunk's context window of keys (padded), relative logits through
// _rel_shift, the tanh softcap, masked entries at the invalid-logits
// value, softmax over the window. eager reproduces what transformers'
// eager attention does with the audio tower's mask: the mask arrives as
// floats (0 allowed, min masked) and logical_not() masks the allowed
// entries instead (the fixture's reference ran eager).
func blockedAudioAttention(a *Gemma4Audio, l *gemma4AudioLayer, x *tensor.Array, valid []bool, eager bool) *tensor.Array {
	cfg := a.cfg
	d, T := cfg.Hidden, x.Dim(1)
	nh, hd := cfg.Heads, d/cfg.Heads
	q := tensor.Mul(l.Q.Forward(x), tensor.Reshape(tensor.BroadcastTo(l.QScale, nh, hd), 1, 1, d)).Float32s()
	k := tensor.MulScalar(l.K.Forward(x), math.Log(1+math.E)/math.Ln2).Float32s()
	v := l.V.Forward(x).Float32s()
	rel := l.RelK.Forward(a.relPos).Float32s()
	chunk, past := cfg.Chunk, cfg.Left-1
	ctx := chunk + past + cfg.Right
	P := a.relPos.Dim(0)
	out := make([]float32, T*d)
	logits := make([]float64, ctx)
	for tq := range T {
		u, i := tq/chunk, tq%chunk
		for hh := range nh {
			for c := range ctx {
				kv := chunk*u - past + c
				in := kv >= 0 && kv < T
				dot := 0.0
				if in {
					for e := range hd {
						dot += float64(q[tq*d+hh*hd+e]) * float64(k[kv*d+hh*hd+e])
					}
				}
				if j := c - i; j >= 0 && j < P { // _rel_shift: zero outside the band
					for e := range hd {
						dot += float64(q[tq*d+hh*hd+e]) * float64(rel[j*d+hh*hd+e])
					}
				}
				dot = math.Tanh(dot/cfg.LogitCap) * cfg.LogitCap
				allowed := in && tq-kv >= 0 && tq-kv < past && valid[kv]
				if masked := !allowed; eager {
					masked = !in || allowed
					if masked {
						dot = cfg.Invalid
					}
				} else if masked {
					dot = cfg.Invalid
				}
				logits[c] = dot
			}
			mx := math.Inf(-1)
			for _, e := range logits {
				mx = math.Max(mx, e)
			}
			s := 0.0
			for c := range logits {
				logits[c] = math.Exp(logits[c] - mx)
				s += logits[c]
			}
			for e := range hd {
				acc := 0.0
				for c := range ctx {
					if kv := chunk*u - past + c; kv >= 0 && kv < T {
						acc += logits[c] / s * float64(v[kv*d+hh*hd+e])
					}
				}
				out[tq*d+hh*hd+e] = float32(acc)
			}
		}
	}
	return l.Post.Forward(tensor.Reshape(float32sOn(a.be, out), 1, T, d))
}

// withEagerAudio makes m's audio tower attend as the fixture's reference
// did (transformers' eager attention) for the rest of the test.
func withEagerAudio(t testing.TB, m *Gemma4Media) {
	m.Audio.attnOverride = func(l *gemma4AudioLayer, x *tensor.Array, valid []bool) *tensor.Array {
		return blockedAudioAttention(m.Audio, l, x, valid, true)
	}
	t.Cleanup(func() { m.Audio.attnOverride = nil })
}

// TestGemma4AudioAttentionMatchesBlocked holds the tower's dense banded
// attention to the literal chunked algorithm (with the mask as intended:
// each frame attends to itself and the previous left-2 valid frames), on
// the fixture's first layer, for a clip whose frames are all valid and
// for one with invalid trailing frames.
func TestGemma4AudioAttentionMatchesBlocked(t *testing.T) {
	m := loadMMMedia(t)
	a := m.Audio
	for _, key := range []string{"w1", "w2"} {
		t.Run(key, func(t *testing.T) {
			sc := tensor.NewScope()
			defer sc.Close()
			f := mmFeatures(t, m, key)
			var got, want []float32
			err := tensor.Try(func() {
				h, valid := a.subsample(f)
				l := a.Layers[0]
				x := l.NormPreAttn.Forward(l.FF1.forward(a, h))
				want = blockedAudioAttention(a, l, x, valid, false).Float32s()
				allowed, relIdx := a.bandMasks(x.Dim(1), valid)
				got = l.attend(a, x, allowed, relIdx).Float32s()
			})
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, "attention", got, want, 1e-5)
		})
	}
}

// TestGemma4AudioMLXLayout loads the audio tower from a copy of the
// fixture laid out as MLX conversions store it (conv weights channels
// last, tower and embedder without the model. prefix): the same output.
func TestGemma4AudioMLXLayout(t *testing.T) {
	m := loadMMMedia(t)
	set, err := safetensors.OpenDir(filepath.Join(mmFixture, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	sc := tensor.NewScope()
	defer sc.Close()
	arrays := map[string]*tensor.Array{}
	for _, n := range set.Names() {
		a, err := set.Array(n, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(n, "conv.weight"): // [O, I, 3, 3] → [O, 3, 3, I]
			a = tensor.Contiguous(tensor.Transpose(a, 0, 2, 3, 1))
		case strings.HasSuffix(n, "depthwise_conv1d.weight"): // [d, 1, K] → [d, K, 1]
			a = tensor.Contiguous(tensor.Transpose(a, 0, 2, 1))
		}
		n = strings.Replace(n, "model.audio_tower.", "audio_tower.", 1)
		n = strings.Replace(n, "model.embed_audio.", "embed_audio.", 1)
		arrays[n] = a
	}
	dir := t.TempDir()
	if err := safetensors.WriteArrays(filepath.Join(dir, "model.safetensors"), arrays, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "processor_config.json"} {
		b, err := os.ReadFile(filepath.Join(mmFixture, "f32", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mlx, err := LoadGemma4Media(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mlx.Close()
	f := mmFeatures(t, m, "w1")
	want, err := m.Audio.Tower(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mlx.Audio.Tower(f)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "mlx-layout tower", got.Float32s(), want.Float32s(), 1e-6)
}
