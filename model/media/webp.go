package media

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"

	"golang.org/x/image/webp"
)

// decodeWebP decodes a still WebP into RGB as PIL (libwebp) does: lossless
// (VP8L) pixels as stored; lossy (VP8) luma and chroma from the VP8
// decoder (a bit-exact specification), chroma upsampled with libwebp's
// "fancy" upsampler and converted with its fixed-point YUV→RGB. Alpha is
// dropped. Animated WebPs are ErrUnsupported.
func decodeWebP(data []byte) (*RGB, error) {
	if webpAnimated(data) {
		return nil, fmt.Errorf("%w: animated WebP images are not supported", ErrUnsupported)
	}
	cfg, err := webp.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: webp: %v", ErrCorrupt, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("%w: webp of %dx%d pixels", ErrCorrupt, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return nil, fmt.Errorf("%w: %dx%d pixels (at most %d)", ErrTooLarge, cfg.Width, cfg.Height, MaxImagePixels)
	}
	img, err := webp.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: webp: %v", ErrCorrupt, err)
	}
	switch m := img.(type) {
	case *image.YCbCr:
		return webpYUVToRGB(m)
	case *image.NYCbCrA:
		return webpYUVToRGB(&m.YCbCr)
	}
	return ToRGB(img), nil
}

// webpAnimated reports whether data's VP8X header sets the animation flag.
func webpAnimated(data []byte) bool {
	return len(data) >= 21 && string(data[12:16]) == "VP8X" && binary.LittleEndian.Uint32(data[16:20]) >= 10 && data[20]&0x02 != 0
}

// webpYUVToRGB converts a decoded VP8 frame (4:2:0) the way libwebp's
// default RGB output does.
func webpYUVToRGB(m *image.YCbCr) (*RGB, error) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	if m.SubsampleRatio != image.YCbCrSubsampleRatio420 || b.Min != (image.Point{}) {
		return nil, fmt.Errorf("%w: webp: unexpected %v frame layout", ErrCorrupt, m.SubsampleRatio)
	}
	cw, ch := (w+1)/2, (h+1)/2
	out := &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}
	u := make([]int32, w)
	v := make([]int32, w)
	for r := range h {
		// libwebp emits rows in pairs: row 2k+1 takes chroma row k as its
		// near row and k+1 as its far one, row 2k+2 the reverse; rows past
		// the chroma plane's edge reuse its last row.
		var near, far int
		if r%2 == 1 {
			near, far = (r-1)/2, (r-1)/2+1
		} else {
			near, far = r/2, r/2-1
		}
		near, far = min(max(near, 0), ch-1), min(max(far, 0), ch-1)
		webpUpsampleRow(m.Cb[near*m.CStride:near*m.CStride+cw], m.Cb[far*m.CStride:far*m.CStride+cw], u)
		webpUpsampleRow(m.Cr[near*m.CStride:near*m.CStride+cw], m.Cr[far*m.CStride:far*m.CStride+cw], v)
		ys := m.Y[r*m.YStride : r*m.YStride+w]
		o := out.Pix[3*r*w : 3*(r+1)*w]
		for x := range w {
			y := webpMultHi(int32(ys[x]), 19077)
			o[3*x] = webpClip8(y + webpMultHi(v[x], 26149) - 14234)
			o[3*x+1] = webpClip8(y - webpMultHi(u[x], 6419) - webpMultHi(v[x], 13320) + 8708)
			o[3*x+2] = webpClip8(y + webpMultHi(u[x], 33050) - 17685)
		}
	}
	return out, nil
}

// webpUpsampleRow fills dst (one output row of chroma) from the chroma
// row nearest it and the other one it lies between, with libwebp's
// integer weights (9, 3, 3, 1)/16 computed in its two rounding steps, and
// (3, 1)/4 vertically only at the first column and at the last of an
// even width.
func webpUpsampleRow(near, far []uint8, dst []int32) {
	w := len(dst)
	edge := func(i int) int32 { return (3*int32(near[i]) + int32(far[i]) + 2) >> 2 }
	dst[0] = edge(0)
	for x := 1; x <= (w-1)>>1; x++ {
		tl, t := int32(near[x-1]), int32(near[x])
		l, c := int32(far[x-1]), int32(far[x])
		avg := tl + t + l + c + 8
		d12 := (avg + 2*(t+l)) >> 3
		d03 := (avg + 2*(tl+c)) >> 3
		dst[2*x-1] = (d12 + tl) >> 1
		dst[2*x] = (d03 + t) >> 1
	}
	if w%2 == 0 {
		dst[w-1] = edge((w - 1) >> 1)
	}
}

func webpMultHi(v, coeff int32) int32 { return (v * coeff) >> 8 }

// webpClip8 is libwebp's VP8Clip8: 6 fractional bits, clamped to a byte.
func webpClip8(v int32) uint8 {
	const mask = (256 << 6) - 1
	if v&^mask == 0 {
		return uint8(v >> 6)
	}
	if v < 0 {
		return 0
	}
	return 255
}
