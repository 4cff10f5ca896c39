package media

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func fixtureAudioConfig(t *testing.T) Gemma4AudioConfig {
	t.Helper()
	c, err := ReadGemma4AudioConfig(filepath.Join(fixture, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readWAV(t *testing.T, name string) *Audio {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixture, "media", name))
	if err != nil {
		t.Skipf("no fixture: %v", err)
	}
	a, err := DecodeWAV(data)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGemma4LogMelMatchesHF holds the features of a 16-bit mono and a
// float stereo WAV to HF's Gemma4AudioFeatureExtractor (decoded as the
// oracle decodes them: int/32768, channel mean), within 1e-5, with the
// same frames, validity mask and soft-token count.
func TestGemma4LogMelMatchesHF(t *testing.T) {
	g := readGolden(t)
	j := readGoldenJSON(t)
	c := fixtureAudioConfig(t)
	for _, key := range []string{"w1", "w2"} {
		t.Run(key, func(t *testing.T) {
			a := readWAV(t, key+".wav")
			if a.Rate != 16000 {
				t.Fatalf("rate %d", a.Rate)
			}
			f, err := Gemma4LogMel(a.Samples, c)
			if err != nil {
				t.Fatal(err)
			}
			want := g["wav_"+key+"_features"]
			if f.Frames != want.Shape[0] || f.Bins != want.Shape[1] {
				t.Fatalf("features %dx%d, HF %v", f.Frames, f.Bins, want.Shape)
			}
			w := want.f32()
			worst := 0.0
			for i := range w {
				worst = max(worst, math.Abs(float64(f.Mel[i]-w[i])))
			}
			t.Logf("max |diff| %.3g", worst)
			if worst > 1e-5 {
				t.Fatalf("log-mel max |diff| %.3g from HF", worst)
			}
			m := g["wav_"+key+"_mask"].raw
			for i := range m {
				if f.Valid[i] != (m[i] != 0) {
					t.Fatalf("frame %d valid %v, HF %d", i, f.Valid[i], m[i])
				}
			}
			if n := int(j.Audio[key]["soft_tokens"].(float64)); n != f.SoftTokens() {
				t.Fatalf("soft tokens %d, HF %d", f.SoftTokens(), n)
			}
		})
	}
}

func TestResampleToModelRate(t *testing.T) {
	a := readWAV(t, "w3.wav")
	if a.Rate != 8000 || len(a.Samples) != 2000 {
		t.Fatalf("w3.wav: %d samples at %d Hz", len(a.Samples), a.Rate)
	}
	r := Resample(a, 16000)
	if r.Rate != 16000 || len(r.Samples) != 4000 {
		t.Fatalf("resampled to %d samples at %d Hz", len(r.Samples), r.Rate)
	}
	// a 300 Hz tone: the interpolated samples away from the edges follow
	// 0.5·sin(2π·300·t) closely
	worst := 0.0
	for i := 200; i < 3800; i++ {
		want := 0.5 * math.Sin(2*math.Pi*300*float64(i)/16000)
		worst = max(worst, math.Abs(float64(r.Samples[i])-want))
	}
	if worst > 0.01 {
		t.Fatalf("resampled tone off by %.4f", worst)
	}
	if Resample(r, 16000) != r {
		t.Fatal("same-rate resample copied")
	}
}

func TestDecodeWAVErrors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixture, "media", "w1.wav"))
	if err != nil {
		t.Skipf("no fixture: %v", err)
	}
	bad := append([]byte(nil), data...)
	bad[20] = 7 // format tag 7 (mu-law)
	cases := map[string][]byte{
		"empty":    nil,
		"mp3":      []byte("ID3\x04\x00\x00\x00\x00\x00\x00"),
		"header":   data[:30],
		"mulaw":    bad,
		"not riff": []byte("RIFF\x00\x00\x00\x00WAVX"),
	}
	for name, d := range cases {
		if _, err := DecodeWAV(d); err == nil {
			t.Errorf("%s: decoded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
