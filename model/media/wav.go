package media

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Audio is decoded mono audio.
type Audio struct {
	Samples []float32 // in [-1, 1]
	Rate    int       // samples per second
}

// Seconds is the clip's length.
func (a *Audio) Seconds() float64 { return float64(len(a.Samples)) / float64(a.Rate) }

// MaxAudioBytes bounds the WAV data DecodeWAV reads (an hour of 16-bit
// stereo at 48 kHz is about 700 MB; this is a tenth of that).
const MaxAudioBytes = 64 << 20

// AudioFormat names the format of data from its magic bytes ("wav", "mp3",
// "flac", "ogg", "m4a") or "".
func AudioFormat(data []byte) string {
	switch {
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WAVE":
		return "wav"
	case bytes.HasPrefix(data, []byte("ID3")), len(data) >= 2 && data[0] == 0xff && data[1]&0xe0 == 0xe0:
		return "mp3"
	case bytes.HasPrefix(data, []byte("fLaC")):
		return "flac"
	case bytes.HasPrefix(data, []byte("OggS")):
		return "ogg"
	case len(data) >= 12 && string(data[4:8]) == "ftyp":
		return "m4a"
	}
	return ""
}

// DecodeWAV decodes a RIFF WAVE file: integer PCM of 8 (unsigned), 16, 24
// or 32 bits, or IEEE float of 32 or 64 bits (WAVE_FORMAT_EXTENSIBLE
// included), scaled to [-1, 1] (v/2^(bits-1)) and mixed down to mono (the
// channels' mean, in float32). Other formats are ErrUnsupported,
// malformed files ErrCorrupt.
func DecodeWAV(data []byte) (*Audio, error) {
	if f := AudioFormat(data); f != "wav" {
		if f == "" {
			return nil, fmt.Errorf("%w: not a WAV file (RIFF/WAVE)", ErrUnsupported)
		}
		return nil, fmt.Errorf("%w: %s audio is not supported (WAV only)", ErrUnsupported, f)
	}
	le := binary.LittleEndian
	var (
		tag, channels, bits uint16
		rate                uint32
		pcm                 []byte
		haveFmt             bool
	)
	for p := 12; p+8 <= len(data); {
		id, size := string(data[p:p+4]), int(le.Uint32(data[p+4:]))
		body := data[p+8:]
		if size < 0 || size > len(body) {
			if id != "data" {
				return nil, fmt.Errorf("%w: wav chunk %q of %d bytes runs past the file", ErrCorrupt, id, size)
			}
			size = len(body) // a streamed file's data size is often wrong: take what is there
		}
		body = body[:size]
		switch id {
		case "fmt ":
			if size < 16 {
				return nil, fmt.Errorf("%w: wav fmt chunk of %d bytes", ErrCorrupt, size)
			}
			tag, channels, rate, bits = le.Uint16(body), le.Uint16(body[2:]), le.Uint32(body[4:]), le.Uint16(body[14:])
			if tag == 0xfffe && size >= 40 {
				tag = le.Uint16(body[24:]) // the sub-format GUID's first two bytes
			}
			haveFmt = true
		case "data":
			pcm = body
		}
		p += 8 + size + size&1
	}
	if !haveFmt || pcm == nil {
		return nil, fmt.Errorf("%w: wav without fmt or data chunk", ErrCorrupt)
	}
	if channels == 0 || rate == 0 || rate > 1_000_000 {
		return nil, fmt.Errorf("%w: wav with %d channels at %d Hz", ErrCorrupt, channels, rate)
	}
	if len(pcm) > MaxAudioBytes {
		return nil, fmt.Errorf("%w: %d bytes of audio (at most %d)", ErrTooLarge, len(pcm), MaxAudioBytes)
	}
	var read func(b []byte) float32
	switch {
	case tag == 1 && bits == 8:
		read = func(b []byte) float32 { return float32(int(b[0])-128) / 128 }
	case tag == 1 && bits == 16:
		read = func(b []byte) float32 { return float32(int16(le.Uint16(b))) / 32768 }
	case tag == 1 && bits == 24:
		read = func(b []byte) float32 {
			v := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			return float32(v) / 8388608
		}
	case tag == 1 && bits == 32:
		read = func(b []byte) float32 { return float32(float64(int32(le.Uint32(b))) / 2147483648) }
	case tag == 3 && bits == 32:
		read = func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }
	case tag == 3 && bits == 64:
		read = func(b []byte) float32 { return float32(math.Float64frombits(le.Uint64(b))) }
	default:
		return nil, fmt.Errorf("%w: wav format %d with %d-bit samples (PCM 8/16/24/32 or float 32/64)", ErrUnsupported, tag, bits)
	}
	step := int(bits) / 8
	frame := step * int(channels)
	n := len(pcm) / frame
	if n == 0 {
		return nil, fmt.Errorf("%w: wav with no samples", ErrCorrupt)
	}
	out := &Audio{Rate: int(rate), Samples: make([]float32, n)}
	for i := range n {
		var s float32
		for c := range int(channels) {
			o := i*frame + c*step
			s += read(pcm[o : o+step])
		}
		if channels > 1 {
			s /= float32(channels)
		}
		out.Samples[i] = s
	}
	return out, nil
}

// Resample converts a to rate with windowed-sinc interpolation (a Hann
// window over 16 zero crossings each side, cut off at the lower rate's
// Nyquist frequency). It returns a itself when the rates agree. It is not
// any Python library's resampler: features of resampled audio match HF's
// only as closely as resamplers agree with one another.
func Resample(a *Audio, rate int) *Audio {
	if a.Rate == rate || len(a.Samples) == 0 {
		return a
	}
	const zeros = 16
	ratio := float64(rate) / float64(a.Rate)
	cut := math.Min(1, ratio) // cutoff as a fraction of the input's Nyquist
	n := int(math.Floor(float64(len(a.Samples)) * ratio))
	out := &Audio{Rate: rate, Samples: make([]float32, n)}
	half := float64(zeros) / cut
	for i := range n {
		t := float64(i) / ratio // position in input samples
		lo := int(math.Ceil(t - half))
		hi := int(math.Floor(t + half))
		var s float64
		for j := max(lo, 0); j <= min(hi, len(a.Samples)-1); j++ {
			x := (float64(j) - t) * cut
			w := 1.0
			if x != 0 {
				w = math.Sin(math.Pi*x) / (math.Pi * x)
			}
			w *= 0.5 + 0.5*math.Cos(math.Pi*x/zeros)
			s += float64(a.Samples[j]) * w * cut
		}
		out.Samples[i] = float32(s)
	}
	return out
}
