package media

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebPMatchesPIL decodes every WebP that tools/oracle/media_webp.py
// wrote with PIL's encoder — lossy at several qualities, odd and even
// sizes, 1×1 and 2×3, lossy with alpha, lossless with and without alpha —
// and holds each to PIL's own decode (convert("RGB"), stored as PNG):
// every byte equal.
func TestWebPMatchesPIL(t *testing.T) {
	dir := filepath.Join("testdata", "webp")
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Skipf("no WebP goldens: %v", err)
	}
	var idx struct {
		Pillow, Libwebp string
		Cases           map[string]struct {
			Width, Height int
			Chunk         string
		}
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Cases) < 8 {
		t.Fatalf("only %d cases in index.json", len(idx.Cases))
	}
	t.Logf("goldens from Pillow %s, libwebp %s", idx.Pillow, idx.Libwebp)
	for name, c := range idx.Cases {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, name+".webp"))
			if err != nil {
				t.Fatal(err)
			}
			if f := ImageFormat(data); f != "webp" {
				t.Fatalf("format %q", f)
			}
			got, err := DecodeImage(data)
			if err != nil {
				t.Fatal(err)
			}
			pngData, err := os.ReadFile(filepath.Join(dir, name+".png"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := DecodeImage(pngData)
			if err != nil {
				t.Fatal(err)
			}
			if got.W != c.Width || got.H != c.Height || want.W != got.W || want.H != got.H {
				t.Fatalf("%dx%d, PIL %dx%d, index %dx%d", got.W, got.H, want.W, want.H, c.Width, c.Height)
			}
			diff, maxd := 0, 0
			for i := range got.Pix {
				d := int(got.Pix[i]) - int(want.Pix[i])
				if d < 0 {
					d = -d
				}
				if d != 0 {
					if diff == 0 {
						t.Logf("first difference at pixel %d channel %d: %d, PIL %d", i/3, i%3, got.Pix[i], want.Pix[i])
					}
					diff++
				}
				maxd = max(maxd, d)
			}
			if diff != 0 {
				t.Errorf("%s (%s): %d of %d bytes differ from PIL's, by at most %d", name, c.Chunk, diff, len(got.Pix), maxd)
			}
		})
	}
}

func TestWebPErrors(t *testing.T) {
	lossy, err := os.ReadFile(filepath.Join("testdata", "webp", "lossy_q75_37x23.webp"))
	if err != nil {
		t.Skipf("no WebP goldens: %v", err)
	}
	anim := []byte("RIFF\x1e\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x02\x00\x00\x00\x09\x00\x00\x09\x00\x00")
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"truncated": {lossy[:len(lossy)/2], "corrupt media"},
		"header":    {[]byte("RIFF\x10\x00\x00\x00WEBPVP8 "), "corrupt media"},
		"animated":  {anim, "animated WebP"},
	} {
		_, err := DecodeImage(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}
