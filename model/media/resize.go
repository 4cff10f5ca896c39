package media

import "math"

// ResizeBicubicAA resizes img to w×h the way torchvision's resize does for
// a uint8 image on the CPU with bicubic interpolation and antialias (what
// Gemma4ImageProcessor calls): PyTorch's native uint8 path, a port of
// Pillow's resampler. Each dimension whose size changes is filtered in
// turn, the width first: the antialiased bicubic weights (Keys' cubic
// with a = -0.5, support widened by the scale when shrinking, normalised
// per output pixel) are computed in float64, scaled to int16 at the
// largest precision that keeps the largest weight in range, and applied
// in integer arithmetic with rounding, each pass clamped to uint8.
func ResizeBicubicAA(img *RGB, w, h int) *RGB {
	pix, cw, ch := img.Pix, img.W, img.H
	if w != cw {
		pix = resampleAxis(pix, ch, cw, w, true)
		cw = w
	}
	if h != ch {
		pix = resampleAxis(pix, ch, cw, h, false)
		ch = h
	}
	if &pix[0] == &img.Pix[0] {
		pix = append([]uint8(nil), pix...)
	}
	return &RGB{W: w, H: h, Pix: pix}
}

// cubicAA is the antialias bicubic filter (a = -0.5).
func cubicAA(x float64) float64 {
	const a = -0.5
	x = math.Abs(x)
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return ((a*x-5*a)*x+8*a)*x - 4*a
	}
	return 0
}

// span is one output position's first input and int16 weights.
type span struct {
	start int
	w     []int32
}

// aaSpans computes the weights for resizing in → out and their fixed-point
// precision, as PyTorch's compute_index_ranges_int16_weights does.
func aaSpans(in, out int) ([]span, uint) {
	scale := float64(in) / float64(out)
	support, invscale := 2.0, 1.0
	if scale >= 1 {
		support, invscale = 2*scale, 1/scale
	}
	maxSize := int(math.Ceil(support))*2 + 1
	ws := make([][]float64, out)
	starts := make([]int, out)
	wtMax := 0.0
	for i := range out {
		center := scale * (float64(i) + 0.5)
		xmin := max(int(center-support+0.5), 0)
		xsize := min(int(center+support+0.5), in) - xmin
		xsize = min(max(xsize, 0), maxSize)
		row := make([]float64, xsize)
		total := 0.0
		for j := range xsize {
			row[j] = cubicAA((float64(j+xmin) - center + 0.5) * invscale)
			total += row[j]
		}
		if total != 0 {
			for j := range row {
				row[j] /= total
				wtMax = max(wtMax, row[j])
			}
		}
		ws[i], starts[i] = row, xmin
	}
	var prec uint
	for prec = 0; prec < 22; prec++ {
		if int(0.5+wtMax*float64(int(1)<<(prec+1))) >= 1<<15 {
			break
		}
	}
	spans := make([]span, out)
	for i, row := range ws {
		s := span{start: starts[i], w: make([]int32, len(row))}
		for j, v := range row {
			v *= float64(int(1) << prec)
			if v < 0 {
				s.w[j] = int32(int16(int(-0.5 + v)))
			} else {
				s.w[j] = int32(int16(int(0.5 + v)))
			}
		}
		spans[i] = s
	}
	return spans, prec
}

// resampleAxis filters an h×w×3 uint8 image along the width (horizontal)
// or the height to n samples.
func resampleAxis(src []uint8, h, w, n int, horizontal bool) []uint8 {
	clip := func(acc int32, prec uint) uint8 {
		return uint8(min(max(acc>>prec, 0), 255))
	}
	if horizontal {
		spans, prec := aaSpans(w, n)
		dst := make([]uint8, h*n*3)
		for y := range h {
			row := src[y*w*3 : (y+1)*w*3]
			for x, s := range spans {
				for c := range 3 {
					acc := int32(1) << (prec - 1)
					for j, wt := range s.w {
						acc += int32(row[(s.start+j)*3+c]) * wt
					}
					dst[(y*n+x)*3+c] = clip(acc, prec)
				}
			}
		}
		return dst
	}
	spans, prec := aaSpans(h, n)
	dst := make([]uint8, n*w*3)
	for y, s := range spans {
		for x := range w {
			for c := range 3 {
				acc := int32(1) << (prec - 1)
				for j, wt := range s.w {
					acc += int32(src[((s.start+j)*w+x)*3+c]) * wt
				}
				dst[(y*w+x)*3+c] = clip(acc, prec)
			}
		}
	}
	return dst
}
