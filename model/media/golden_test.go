package media

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// fixture is model/testdata/gemma4_mm, made by tools/oracle/models_gemma4_mm.py.
var fixture = filepath.Join("..", "testdata", "gemma4_mm")

type goldenTensor struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Off   [2]int `json:"data_offsets"`
	raw   []byte
}

// readGolden parses golden.safetensors (8-byte header size, JSON header,
// data) without the tensor package.
func readGolden(t *testing.T) map[string]*goldenTensor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixture, "golden.safetensors"))
	if err != nil {
		t.Skipf("no golden fixture: %v", err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string]*goldenTensor{}
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var g goldenTensor
		if err := json.Unmarshal(v, &g); err != nil {
			t.Fatal(err)
		}
		g.raw = b[8+int(n)+g.Off[0] : 8+int(n)+g.Off[1]]
		out[k] = &g
	}
	return out
}

func (g *goldenTensor) f32() []float32 {
	out := make([]float32, len(g.raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(g.raw[4*i:]))
	}
	return out
}

func (g *goldenTensor) i32() []int32 {
	out := make([]int32, len(g.raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(g.raw[4*i:]))
	}
	return out
}

type goldenJSON struct {
	Images map[string]map[string]any `json:"images"`
	Audio  map[string]map[string]any `json:"audio"`
	Image  map[string]any            `json:"image_processor_config"`
}

func readGoldenJSON(t *testing.T) *goldenJSON {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixture, "golden.json"))
	if err != nil {
		t.Skipf("no golden fixture: %v", err)
	}
	var g goldenJSON
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func fixtureImageConfig(t *testing.T) Gemma4ImageConfig {
	t.Helper()
	c, err := ReadGemma4ImageConfig(filepath.Join(fixture, "f32"))
	if err != nil {
		t.Fatal(err)
	}
	if c.PatchSize != 4 || c.MaxSoftTokens != 70 || c.PoolingKernel != 3 {
		t.Fatalf("fixture image config %+v", c)
	}
	return c
}

// TestGemma4ImageMatchesHF holds the Go processor to HF's
// Gemma4ImageProcessor (torchvision backend): every pixel of every real
// patch, the positions, the padding's -1 positions and the soft-token
// count, for an upscaled, a downscaled, an unresized grayscale and a tall
// image (PNG, decoded exactly), and a JPEG from PIL's decoded pixels.
func TestGemma4ImageMatchesHF(t *testing.T) {
	g := readGolden(t)
	j := readGoldenJSON(t)
	c := fixtureImageConfig(t)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		t.Run(key, func(t *testing.T) {
			var img *RGB
			if d, ok := g["img_"+key+"_decoded"]; ok {
				img = &RGB{H: d.Shape[0], W: d.Shape[1], Pix: d.raw}
			} else {
				data, err := os.ReadFile(filepath.Join(fixture, "media", key+".png"))
				if err != nil {
					t.Fatal(err)
				}
				if img, err = DecodeImage(data); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Gemma4Preprocess(img, c)
			if err != nil {
				t.Fatal(err)
			}
			want := g["img_"+key+"_tv_pixels_u8"]
			if want.Shape[0] != got.Patches() || want.Shape[1] != got.PatchDim {
				t.Fatalf("patches %dx%d, HF %v", got.Patches(), got.PatchDim, want.Shape)
			}
			if n := int(j.Images[key]["tv_soft_tokens"].(float64)); n != got.SoftTokens {
				t.Fatalf("soft tokens %d, HF %d", got.SoftTokens, n)
			}
			inv := float32(1.0 / 255)
			bad, worst := 0, float32(0)
			for i, q := range want.raw {
				w := float32(q) * inv // HF's pixel values are exactly this (golden.json *_mul_inv255_exact)
				if d := float32(math.Abs(float64(got.Pixels[i] - w))); d > 0 {
					bad++
					worst = max(worst, d*255)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d pixel values differ from HF (worst by %.2f/255)", bad, len(want.raw), worst)
			}
			pos := g["img_"+key+"_tv_positions"].i32()
			for n := range len(pos) / 2 {
				x, y := pos[2*n], pos[2*n+1]
				if n < got.Patches() {
					if x != got.X[n] || y != got.Y[n] {
						t.Fatalf("patch %d at (%d,%d), HF (%d,%d)", n, got.X[n], got.Y[n], x, y)
					}
				} else if x != -1 || y != -1 {
					t.Fatalf("padding patch %d at (%d,%d), HF pads with -1", n, x, y)
				}
			}
		})
	}
}

// TestDecodeJPEGNearPIL checks Go's JPEG decoding against PIL's (libjpeg):
// the chroma upsampling and colour conversion are libjpeg's, the inverse
// DCTs are not, so closeness (not equality) is asked.
func TestDecodeJPEGNearPIL(t *testing.T) {
	g := readGolden(t)
	data, err := os.ReadFile(filepath.Join(fixture, "media", "e.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := DecodeImage(data)
	if err != nil {
		t.Fatal(err)
	}
	want := g["img_e_decoded"]
	if img.H != want.Shape[0] || img.W != want.Shape[1] {
		t.Fatalf("decoded %dx%d, PIL %v", img.W, img.H, want.Shape)
	}
	var sum float64
	worst := 0
	for i, v := range want.raw {
		d := int(img.Pix[i]) - int(v)
		if d < 0 {
			d = -d
		}
		worst = max(worst, d)
		sum += float64(d)
	}
	mean := sum / float64(len(want.raw))
	t.Logf("JPEG decode vs PIL: mean |diff| %.3f, worst %d", mean, worst)
	if mean > 0.2 || worst > 4 {
		t.Fatalf("JPEG decode far from PIL's: mean |diff| %.3f, worst %d", mean, worst)
	}
}

func TestDecodeImageErrors(t *testing.T) {
	png, err := os.ReadFile(filepath.Join(fixture, "media", "a.png"))
	if err != nil {
		t.Skipf("no fixture: %v", err)
	}
	cases := map[string][]byte{
		"empty":     nil,
		"text":      []byte("hello, not an image"),
		"truncated": png[:len(png)/2],
		"webp":      []byte("RIFF\x10\x00\x00\x00WEBPVP8 "), // a header and nothing after it
	}
	for name, data := range cases {
		if _, err := DecodeImage(data); err == nil {
			t.Errorf("%s: decoded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := DecodeImage(png); err != nil {
		t.Fatal(err)
	}
}

func TestGemma4TargetSize(t *testing.T) {
	// the real processor: 16-pixel patches, 280 soft tokens, 3×3 pooling
	for _, c := range []struct{ h, w, th, tw int }{
		{896, 896, 768, 768},
		{768, 768, 768, 768},
		{480, 640, 672, 912},
		{10, 2000, 48, 11328},
		{1, 1000, 48, 13440}, // too thin: one row of pooled patches, capped
	} {
		th, tw, err := Gemma4TargetSize(c.h, c.w, 16, 280*9, 3)
		if err != nil {
			t.Fatal(err)
		}
		if th*tw > 280*9*256 || th%48 != 0 || tw%48 != 0 {
			t.Errorf("%dx%d → %dx%d breaks the budget", c.w, c.h, tw, th)
		}
		if c.th != 0 && (th != c.th || tw != c.tw) {
			t.Errorf("%dx%d → %dx%d, want %dx%d", c.w, c.h, tw, th, c.tw, c.th)
		}
	}
}
