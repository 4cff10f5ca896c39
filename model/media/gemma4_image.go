package media

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Gemma4ImageConfig is the part of Gemma4ImageProcessor's config that
// shapes its output (processor_config.json's "image_processor", or
// preprocessor_config.json), with transformers' defaults.
type Gemma4ImageConfig struct {
	PatchSize     int       `json:"patch_size"`
	MaxSoftTokens int       `json:"max_soft_tokens"`
	PoolingKernel int       `json:"pooling_kernel_size"`
	DoResize      *bool     `json:"do_resize"`
	DoRescale     *bool     `json:"do_rescale"`
	RescaleFactor float64   `json:"rescale_factor"`
	DoNormalize   bool      `json:"do_normalize"`
	ImageMean     []float64 `json:"image_mean"`
	ImageStd      []float64 `json:"image_std"`
	Resample      *int      `json:"resample"`
}

// DefaultGemma4ImageConfig is Gemma4ImageProcessor's defaults: 16-pixel
// patches, 280 soft tokens, 3×3 pooling, rescale by 1/255, no
// normalisation.
func DefaultGemma4ImageConfig() Gemma4ImageConfig {
	return Gemma4ImageConfig{PatchSize: 16, MaxSoftTokens: 280, PoolingKernel: 3, RescaleFactor: 1.0 / 255}
}

// gemma4SoftTokenBudgets are the max_soft_tokens values transformers accepts.
var gemma4SoftTokenBudgets = []int{70, 140, 280, 560, 1120}

func (c *Gemma4ImageConfig) validate() error {
	if c.PatchSize <= 0 || c.PoolingKernel <= 0 {
		return fmt.Errorf("media: gemma4 image processor: patch_size %d, pooling_kernel_size %d", c.PatchSize, c.PoolingKernel)
	}
	ok := false
	for _, v := range gemma4SoftTokenBudgets {
		ok = ok || v == c.MaxSoftTokens
	}
	if !ok {
		return fmt.Errorf("media: gemma4 image processor: max_soft_tokens %d is not one of %v", c.MaxSoftTokens, gemma4SoftTokenBudgets)
	}
	if c.Resample != nil && *c.Resample != 3 {
		return fmt.Errorf("%w: gemma4 image processor resample %d (only bicubic, 3)", ErrUnsupported, *c.Resample)
	}
	if c.DoNormalize && (len(c.ImageMean) != 3 || len(c.ImageStd) != 3) {
		return fmt.Errorf("media: gemma4 image processor: do_normalize needs 3 image_mean and image_std values")
	}
	return nil
}

// ReadProcessorSection reads the named section ("image_processor",
// "feature_extractor") of a checkpoint folder's processor_config.json
// into v (the whole file for section ""), or, without one, the flat
// preprocessor_config.json. It reports false (and leaves v alone) when
// the folder has neither.
func ReadProcessorSection(dir, section string, v any) (bool, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "processor_config.json"))
	if err == nil {
		var outer map[string]json.RawMessage
		if err := json.Unmarshal(raw, &outer); err != nil {
			return false, fmt.Errorf("media: %s: %v", filepath.Join(dir, "processor_config.json"), err)
		}
		if section == "" {
			if err := json.Unmarshal(raw, v); err != nil {
				return false, fmt.Errorf("media: processor_config.json: %v", err)
			}
			return true, nil
		}
		if sec, ok := outer[section]; ok {
			if err := json.Unmarshal(sec, v); err != nil {
				return false, fmt.Errorf("media: processor_config.json %s: %v", section, err)
			}
			return true, nil
		}
	}
	raw, err = os.ReadFile(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("media: %s: %v", filepath.Join(dir, "preprocessor_config.json"), err)
	}
	return true, nil
}

// ReadGemma4ImageConfig reads a checkpoint folder's image processor
// config, defaults where the folder has none.
func ReadGemma4ImageConfig(dir string) (Gemma4ImageConfig, error) {
	c := DefaultGemma4ImageConfig()
	if _, err := ReadProcessorSection(dir, "image_processor", &c); err != nil {
		return c, err
	}
	if c.RescaleFactor == 0 {
		c.RescaleFactor = 1.0 / 255
	}
	return c, c.validate()
}

// Gemma4TargetSize is get_aspect_ratio_preserving_size: the largest
// height and width, multiples of pooling·patch, that keep the aspect
// ratio and give at most maxPatches patches.
func Gemma4TargetSize(height, width, patch, maxPatches, pool int) (int, int, error) {
	totalPx := float64(height * width)
	targetPx := float64(maxPatches * patch * patch)
	factor := math.Sqrt(targetPx / totalPx)
	side := pool * patch
	th := int(math.Floor(factor*float64(height)/float64(side))) * side
	tw := int(math.Floor(factor*float64(width)/float64(side))) * side
	if th == 0 && tw == 0 {
		return 0, 0, fmt.Errorf("media: a %dx%d image resizes to 0x0 (sides must be multiples of %d)", width, height, side)
	}
	maxSide := (maxPatches / (pool * pool)) * side
	switch {
	case th == 0:
		th = side
		tw = min(int(math.Floor(float64(width)/float64(height)))*side, maxSide)
	case tw == 0:
		tw = side
		th = min(int(math.Floor(float64(height)/float64(width)))*side, maxSide)
	}
	if float64(th*tw) > targetPx {
		return 0, 0, fmt.Errorf("media: resizing %dx%d to %dx%d exceeds %d patches of %d pixels", width, height, tw, th, maxPatches, patch)
	}
	return th, tw, nil
}

// Gemma4Image is one image as Gemma4ImageProcessor leaves it, without the
// padding to max_soft_tokens·pool² patches (padding patches change nothing
// the tower computes for real ones).
type Gemma4Image struct {
	// Pixels are the patches, [Patches][patch·patch·3] row-major: within a
	// patch, rows, then columns, then channels.
	Pixels []float32
	// X, Y are each patch's grid position (the processor's
	// image_position_ids), in row-major patch order.
	X, Y []int32
	// GridW, GridH are the patch grid's size.
	GridW, GridH int
	// SoftTokens is the number of placeholder tokens (patches / pool²).
	SoftTokens int
	// PatchDim is patch·patch·3.
	PatchDim int
	// Resized is the image after the resize (before rescaling).
	Resized *RGB
}

// Patches is the number of real patches.
func (g *Gemma4Image) Patches() int { return len(g.X) }

// Gemma4Preprocess runs Gemma4ImageProcessor on an RGB image: the
// aspect-preserving resize (skipped when the image already has its target
// size), rescale (float32(v)·float32(factor), as torchvision does) and
// optional normalisation, patchify, and patch positions.
func Gemma4Preprocess(img *RGB, c Gemma4ImageConfig) (*Gemma4Image, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if img == nil || img.W <= 0 || img.H <= 0 || len(img.Pix) != 3*img.W*img.H {
		return nil, fmt.Errorf("%w: empty or malformed image", ErrCorrupt)
	}
	p, k := c.PatchSize, c.PoolingKernel
	maxPatches := c.MaxSoftTokens * k * k
	if c.DoResize == nil || *c.DoResize {
		th, tw, err := Gemma4TargetSize(img.H, img.W, p, maxPatches, k)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		img = ResizeBicubicAA(img, tw, th)
	}
	if img.W%p != 0 || img.H%p != 0 {
		return nil, fmt.Errorf("media: a %dx%d image is not a whole number of %d-pixel patches", img.W, img.H, p)
	}
	gw, gh := img.W/p, img.H/p
	if gw*gh > maxPatches || (gw*gh)%(k*k) != 0 {
		return nil, fmt.Errorf("media: %dx%d patches do not pool into at most %d soft tokens", gw, gh, c.MaxSoftTokens)
	}
	scale := float32(c.RescaleFactor)
	rescale := c.DoRescale == nil || *c.DoRescale
	var mean, inv [3]float32
	if c.DoNormalize {
		for i := range 3 {
			mean[i], inv[i] = float32(c.ImageMean[i]), float32(c.ImageStd[i])
		}
	}
	dim := p * p * 3
	out := &Gemma4Image{GridW: gw, GridH: gh, PatchDim: dim, SoftTokens: gw * gh / (k * k), Resized: img,
		Pixels: make([]float32, gw*gh*dim), X: make([]int32, gw*gh), Y: make([]int32, gw*gh)}
	for py := range gh {
		for px := range gw {
			n := py*gw + px
			out.X[n], out.Y[n] = int32(px), int32(py)
			dst := out.Pixels[n*dim : (n+1)*dim]
			i := 0
			for r := range p {
				row := (py*p + r) * img.W
				for cc := range p {
					o := (row + px*p + cc) * 3
					for ch := range 3 {
						v := float32(img.Pix[o+ch])
						if rescale {
							v *= scale
						}
						if c.DoNormalize {
							v = (v - mean[ch]) / inv[ch]
						}
						dst[i] = v
						i++
					}
				}
			}
		}
	}
	return out, nil
}
