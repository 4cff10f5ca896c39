// Package media turns image and audio files into the inputs of
// multimodal towers, the way Hugging Face's processors do: image decoding
// and the aspect-preserving bicubic resize, rescale and patchify of
// Gemma 4's image processor; WAV decoding, mono mixdown, resampling and the
// log-mel spectrogram of Gemma 4's audio feature extractor. It is pure Go
// (no tensors): the model package feeds what it returns to the towers.
package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registers GIF with image.Decode
	_ "image/jpeg"
	_ "image/png"
)

// Errors wrapped by what this package returns, for callers that map them
// to a status (a server's 400).
var (
	// ErrUnsupported is a format this package does not decode.
	ErrUnsupported = errors.New("unsupported media format")
	// ErrCorrupt is a file of a known format that does not decode.
	ErrCorrupt = errors.New("corrupt media")
	// ErrTooLarge is media over a configured limit.
	ErrTooLarge = errors.New("media too large")
)

// RGB is an 8-bit RGB image, row-major, 3 bytes per pixel.
type RGB struct {
	W, H int
	Pix  []uint8 // len 3·W·H
}

// MaxImagePixels bounds the decoded size DecodeImage accepts (a 100
// megapixel image is already 300 MB of RGB).
const MaxImagePixels = 100 << 20

// ImageFormat names the format of data from its magic bytes ("png",
// "jpeg", "gif", "webp", "bmp", "tiff", "heic", "avif") or "" when none
// is recognised.
func ImageFormat(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(data, []byte{0xff, 0xd8, 0xff}):
		return "jpeg"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return "gif"
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return "webp"
	case bytes.HasPrefix(data, []byte("BM")):
		return "bmp"
	case bytes.HasPrefix(data, []byte("II*\x00")), bytes.HasPrefix(data, []byte("MM\x00*")):
		return "tiff"
	case len(data) >= 12 && string(data[4:8]) == "ftyp":
		switch string(data[8:12]) {
		case "avif", "avis":
			return "avif"
		case "heic", "heix", "mif1", "msf1", "hevc":
			return "heic"
		}
	}
	return ""
}

// DecodeImage decodes a PNG, JPEG, GIF (its first frame) or still WebP
// into RGB the way PIL's convert("RGB") does: alpha is dropped (not
// composited), grayscale is replicated, palettes are looked up. Other
// formats (animated WebP among them) are
// ErrUnsupported, undecodable data ErrCorrupt, and images over
// MaxImagePixels ErrTooLarge.
func DecodeImage(data []byte) (*RGB, error) {
	f := ImageFormat(data)
	switch f {
	case "png", "jpeg", "gif":
	case "webp":
		return decodeWebP(data)
	case "":
		return nil, fmt.Errorf("%w: not an image in a supported format (PNG, JPEG, GIF or WebP)", ErrUnsupported)
	default:
		return nil, fmt.Errorf("%w: %s images are not supported (PNG, JPEG, GIF or WebP)", ErrUnsupported, f)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("%w: %s of %dx%d pixels", ErrCorrupt, f, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return nil, fmt.Errorf("%w: %dx%d pixels (at most %d)", ErrTooLarge, cfg.Width, cfg.Height, MaxImagePixels)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f, err)
	}
	return ToRGB(img), nil
}

// ToRGB converts any image to RGB, dropping alpha as PIL's
// convert("RGB") does (the colour channels are taken un-premultiplied).
func ToRGB(img image.Image) *RGB {
	b := img.Bounds()
	out := &RGB{W: b.Dx(), H: b.Dy(), Pix: make([]uint8, 3*b.Dx()*b.Dy())}
	i := 0
	set := func(r, g, bl uint8) {
		out.Pix[i], out.Pix[i+1], out.Pix[i+2] = r, g, bl
		i += 3
	}
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(m, out)
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				v := m.Pix[m.PixOffset(x, y)]
				set(v, v, v)
			}
		}
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				o := m.PixOffset(x, y)
				set(m.Pix[o], m.Pix[o+1], m.Pix[o+2])
			}
		}
	case *image.RGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				o := m.PixOffset(x, y)
				if a := m.Pix[o+3]; a == 255 || a == 0 {
					set(m.Pix[o], m.Pix[o+1], m.Pix[o+2])
				} else {
					c := color.NRGBAModel.Convert(color.RGBA{m.Pix[o], m.Pix[o+1], m.Pix[o+2], a}).(color.NRGBA)
					set(c.R, c.G, c.B)
				}
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBA64Model.Convert(img.At(x, y)).(color.NRGBA64)
				set(uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8))
			}
		}
	}
	return out
}

// ycbcrToRGB converts a decoded JPEG the way libjpeg (PIL's decoder)
// does by default: 4:2:0 and 4:2:2 chroma upsampled with its "fancy"
// triangle filter (edges replicated, alternating rounding), then its
// fixed-point YCbCr→RGB. The inverse DCTs still differ (Go's is not
// libjpeg's), so pixels agree only to a level or two.
func ycbcrToRGB(m *image.YCbCr, out *RGB) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	cw, ch := (w+1)/2, (h+1)/2
	var hs, vs bool // horizontal, vertical chroma subsampling by 2
	ratio := m.SubsampleRatio
	if b.Min != (image.Point{}) {
		ratio = -1 // a sub-image: its chroma planes are not laid out from the origin
	}
	switch ratio {
	case image.YCbCrSubsampleRatio420:
		hs, vs = true, true
	case image.YCbCrSubsampleRatio422:
		hs = true
		ch = h
	case image.YCbCrSubsampleRatio444:
		cw, ch = w, h
	default:
		i := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				out.Pix[i], out.Pix[i+1], out.Pix[i+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				i += 3
			}
		}
		return
	}
	chroma := func(plane []uint8, cx, cy int) int {
		cx, cy = min(max(cx, 0), cw-1), min(max(cy, 0), ch-1)
		return int(plane[cy*m.CStride+cx])
	}
	// up returns the upsampled chroma of plane at pixel (x, y).
	up := func(plane []uint8, x, y int) int {
		cx, cy := x, y
		if hs {
			cx = x / 2
		}
		if vs {
			cy = y / 2
		}
		if !hs {
			return chroma(plane, cx, cy)
		}
		nx := cx - 1
		if x%2 == 1 {
			nx = cx + 1
		}
		if !vs { // h2v1: (3·this + neighbour + 1 or 2) / 4
			v := 3*chroma(plane, cx, cy) + chroma(plane, nx, cy)
			if x%2 == 0 {
				return (v + 1) >> 2
			}
			return (v + 2) >> 2
		}
		ny := cy - 1
		if y%2 == 1 {
			ny = cy + 1
		}
		col := func(c int) int { return 3*chroma(plane, c, cy) + chroma(plane, c, ny) }
		if x%2 == 0 {
			return (3*col(cx) + col(nx) + 8) >> 4
		}
		return (3*col(cx) + col(nx) + 7) >> 4
	}
	const half = 1 << 15
	fix := func(v float64) int { return int(v*65536 + 0.5) }
	crR, cbB, cbG, crG := fix(1.40200), fix(1.77200), fix(0.34414), fix(0.71414)
	clamp := func(v int) uint8 { return uint8(min(max(v, 0), 255)) }
	i := 0
	for y := range h {
		for x := range w {
			yy := int(m.Y[m.YOffset(b.Min.X+x, b.Min.Y+y)])
			cb := up(m.Cb, x, y) - 128
			cr := up(m.Cr, x, y) - 128
			out.Pix[i] = clamp(yy + (crR*cr+half)>>16)
			out.Pix[i+1] = clamp(yy + (-cbG*cb-crG*cr+half)>>16)
			out.Pix[i+2] = clamp(yy + (cbB*cb+half)>>16)
			i += 3
		}
	}
}
