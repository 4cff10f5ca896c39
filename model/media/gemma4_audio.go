package media

import (
	"encoding/json"
	"fmt"
	"math"
	"math/cmplx"
	"strconv"
	"strings"
)

// Gemma4AudioConfig is the part of Gemma4AudioFeatureExtractor's config
// that shapes its output, with transformers' defaults.
type Gemma4AudioConfig struct {
	FeatureSize   int       `json:"feature_size"`
	SamplingRate  int       `json:"sampling_rate"`
	FrameLengthMs float64   `json:"frame_length_ms"`
	HopLengthMs   float64   `json:"hop_length_ms"`
	MinFrequency  float64   `json:"min_frequency"`
	MaxFrequency  float64   `json:"max_frequency"`
	MelFloor      flexFloat `json:"mel_floor"`
	Preemphasis   float64   `json:"preemphasis"`
	InputScale    float64   `json:"input_scale_factor"`
	FFTOverdrive  bool      `json:"fft_overdrive"`
	Dither        float64   `json:"dither"`
	PerBinMean    []float64 `json:"per_bin_mean"`
	PerBinStddev  []float64 `json:"per_bin_stddev"`
	// MaxSamples is the feature extractor's max_length (30 s at 16 kHz):
	// longer audio is truncated.
	MaxSamples int `json:"-"`
	// PadMultiple is pad_to_multiple_of (128 samples).
	PadMultiple int `json:"-"`
}

// DefaultGemma4AudioConfig is Gemma4AudioFeatureExtractor's defaults.
func DefaultGemma4AudioConfig() Gemma4AudioConfig {
	return Gemma4AudioConfig{FeatureSize: 128, SamplingRate: 16000, FrameLengthMs: 20, HopLengthMs: 10,
		MaxFrequency: 8000, MelFloor: 1e-3, InputScale: 1, MaxSamples: 480000, PadMultiple: 128}
}

// ReadGemma4AudioConfig reads a checkpoint folder's feature extractor
// config, defaults where the folder has none.
func ReadGemma4AudioConfig(dir string) (Gemma4AudioConfig, error) {
	c := DefaultGemma4AudioConfig()
	if _, err := ReadProcessorSection(dir, "feature_extractor", &c); err != nil {
		return c, err
	}
	return c, c.validate()
}

// flexFloat is a number that a config may also spell as a string (an
// array attribute serialised with str()).
type flexFloat float64

// UnmarshalJSON reads a number, or a string holding one.
func (f *flexFloat) UnmarshalJSON(b []byte) error {
	var v float64
	if err := json.Unmarshal(b, &v); err == nil {
		*f = flexFloat(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := strconv.ParseFloat(strings.Trim(s, "[] "), 64)
	if err != nil {
		return err
	}
	*f = flexFloat(v)
	return nil
}

func (c *Gemma4AudioConfig) validate() error {
	if c.FeatureSize <= 0 || c.SamplingRate <= 0 || c.FrameLengthMs <= 0 || c.HopLengthMs <= 0 || c.MaxFrequency <= c.MinFrequency {
		return fmt.Errorf("media: gemma4 feature extractor: feature_size %d, sampling_rate %d, frame %v ms, hop %v ms, %v-%v Hz",
			c.FeatureSize, c.SamplingRate, c.FrameLengthMs, c.HopLengthMs, c.MinFrequency, c.MaxFrequency)
	}
	if c.Preemphasis != 0 || c.Dither != 0 {
		return fmt.Errorf("%w: gemma4 feature extractor with preemphasis %v or dither %v", ErrUnsupported, c.Preemphasis, c.Dither)
	}
	if (c.PerBinMean != nil && len(c.PerBinMean) != c.FeatureSize) || (c.PerBinStddev != nil && len(c.PerBinStddev) != c.FeatureSize) {
		return fmt.Errorf("media: gemma4 feature extractor: per-bin statistics of the wrong size")
	}
	if c.MaxSamples == 0 {
		c.MaxSamples = 30 * c.SamplingRate
	}
	if c.PadMultiple == 0 {
		c.PadMultiple = 128
	}
	if c.InputScale == 0 {
		c.InputScale = 1
	}
	return nil
}

func (c *Gemma4AudioConfig) frameLength() int {
	return int(math.RoundToEven(float64(c.SamplingRate) * c.FrameLengthMs / 1000))
}
func (c *Gemma4AudioConfig) hopLength() int {
	return int(math.RoundToEven(float64(c.SamplingRate) * c.HopLengthMs / 1000))
}
func (c *Gemma4AudioConfig) fftLength() int {
	n := 1 << int(math.Ceil(math.Log2(float64(c.frameLength()))))
	if c.FFTOverdrive {
		n *= 2
	}
	return n
}

// Gemma4Features is a clip's log-mel spectrogram as
// Gemma4AudioFeatureExtractor returns it.
type Gemma4Features struct {
	// Mel is [Frames][FeatureSize] row-major, zero on invalid frames.
	Mel []float32
	// Valid marks the frames whose analysis window holds only real audio.
	Valid  []bool
	Frames int
	Bins   int
}

// SoftTokens is the number of audio soft tokens the clip gives: the valid
// frames left after the audio tower's two stride-2 subsamplings, as
// Gemma4Processor counts them (mask[::2] twice).
func (f *Gemma4Features) SoftTokens() int {
	n := 0
	for i := 0; i < len(f.Valid); i += 4 {
		if f.Valid[i] {
			n++
		}
	}
	return n
}

// melFilters is transformers' mel_filter_bank with HTK mels and no
// normalisation: [bins][filters] triangles over linearly spaced FFT bins.
func melFilters(bins, filters int, fmin, fmax float64, rate int) []float64 {
	toMel := func(f float64) float64 { return 2595 * math.Log10(1+f/700) }
	toHz := func(m float64) float64 { return 700 * (math.Pow(10, m/2595) - 1) }
	linspace := func(a, b float64, n int) []float64 {
		out := make([]float64, n)
		step := (b - a) / float64(n-1)
		for i := range out {
			out[i] = float64(i)*step + a
		}
		out[n-1] = b
		return out
	}
	mels := linspace(toMel(fmin), toMel(fmax), filters+2)
	hz := make([]float64, len(mels))
	for i, m := range mels {
		hz[i] = toHz(m)
	}
	fft := linspace(0, float64(rate/2), bins)
	out := make([]float64, bins*filters)
	for b, f := range fft {
		for m := range filters {
			down := -(hz[m] - f) / (hz[m+1] - hz[m])
			up := (hz[m+2] - f) / (hz[m+2] - hz[m+1])
			out[b*filters+m] = math.Max(0, math.Min(down, up))
		}
	}
	return out
}

// fft computes the in-place radix-2 FFT of x (len a power of two).
func fft(x []complex128) {
	n := len(x)
	for i, j := 1, 0; i < n; i++ {
		bit := n >> 1
		for ; j&bit != 0; bit >>= 1 {
			j ^= bit
		}
		j ^= bit
		if i < j {
			x[i], x[j] = x[j], x[i]
		}
	}
	for size := 2; size <= n; size <<= 1 {
		w := cmplx.Exp(complex(0, -2*math.Pi/float64(size)))
		for start := 0; start < n; start += size {
			wk := complex(1, 0)
			for k := range size / 2 {
				a, b := x[start+k], x[start+k+size/2]*wk
				x[start+k], x[start+k+size/2] = a+b, a-b
				wk *= w
			}
		}
	}
}

// Gemma4LogMel computes Gemma4AudioFeatureExtractor's features for mono
// samples at the config's sampling rate: truncation to MaxSamples, zero
// padding to a multiple of PadMultiple, a half-frame of leading zeros
// (semicausal framing), frames of frame_length+1 samples every hop of
// which the first frame_length are windowed (periodic Hann, float32) and
// zero-padded to the FFT size, |rfft| times the HTK mel filters, log(x +
// mel_floor), optional per-bin normalisation, and invalid frames zeroed.
func Gemma4LogMel(samples []float32, c Gemma4AudioConfig) (*Gemma4Features, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%w: empty audio", ErrCorrupt)
	}
	if len(samples) > c.MaxSamples {
		samples = samples[:c.MaxSamples]
	}
	real := len(samples)
	padded := real
	if r := padded % c.PadMultiple; r != 0 {
		padded += c.PadMultiple - r
	}
	fl, hop, nfft := c.frameLength(), c.hopLength(), c.fftLength()
	left := fl / 2
	total := left + padded
	wave := make([]float32, total)
	for i, v := range samples {
		if c.InputScale != 1 {
			v = float32(float64(v) * c.InputScale)
		}
		wave[left+i] = v
	}
	unfold := fl + 1
	frames := (total-unfold)/hop + 1
	if frames <= 0 {
		return nil, fmt.Errorf("%w: audio of %d samples is shorter than one %d-sample frame", ErrCorrupt, real, unfold)
	}
	window := make([]float32, fl)
	for n := range window {
		window[n] = float32(0.5 - 0.5*math.Cos(2*math.Pi*float64(n)/float64(fl)))
	}
	bins := nfft/2 + 1
	filt := melFilters(bins, c.FeatureSize, c.MinFrequency, c.MaxFrequency, c.SamplingRate)
	out := &Gemma4Features{Mel: make([]float32, frames*c.FeatureSize), Valid: make([]bool, frames), Frames: frames, Bins: c.FeatureSize}
	buf := make([]complex128, nfft)
	mag := make([]float64, bins)
	for f := range frames {
		start := f * hop
		// valid when the frame's last sample is real audio
		end := start + unfold - 1
		out.Valid[f] = end >= left && end < left+real
		for i := range buf {
			buf[i] = 0
		}
		for i := range fl {
			buf[i] = complex(float64(wave[start+i]*window[i]), 0)
		}
		fft(buf)
		for k := range bins {
			mag[k] = float64(float32(cmplx.Abs(buf[k])))
		}
		if !out.Valid[f] {
			continue
		}
		row := out.Mel[f*c.FeatureSize : (f+1)*c.FeatureSize]
		for m := range c.FeatureSize {
			var s float64
			for k := range bins {
				s += mag[k] * filt[k*c.FeatureSize+m]
			}
			v := math.Log(s + float64(c.MelFloor))
			if c.PerBinMean != nil {
				v -= c.PerBinMean[m]
			}
			if c.PerBinStddev != nil {
				v /= c.PerBinStddev[m]
			}
			row[m] = float32(v)
		}
	}
	return out, nil
}
