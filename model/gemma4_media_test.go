package model

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// collapse undoes the processor's expansion: each begin/placeholders/end
// run becomes one placeholder, as a rendered prompt holds it.
func collapse(ids []int32, tok Gemma4Tokens) []int32 {
	var out []int32
	for i := 0; i < len(ids); i++ {
		switch ids[i] {
		case tok.BOI, tok.EOI, tok.BOA, tok.EOA:
			continue
		case tok.Image, tok.Audio:
			if i > 0 && ids[i-1] == ids[i] {
				continue
			}
		}
		out = append(out, ids[i])
	}
	return out
}

// TestGemma4ExpandMatchesProcessor encodes each golden prompt's media from
// their files and expands the collapsed prompt: the ids must be the ones
// the oracle built by Gemma4Processor's rule, and Locate must find the
// same runs in them.
func TestGemma4ExpandMatchesProcessor(t *testing.T) {
	_, j := readMMGolden(t)
	m := loadMMMedia(t)
	for name, pr := range j.Prompts {
		t.Run(name, func(t *testing.T) {
			sc := tensor.NewScope()
			defer sc.Close()
			var ms []*Medium
			add := func(kind MediaKind, file string) {
				data, err := os.ReadFile(filepath.Join(mmFixture, "media", file))
				if err != nil {
					t.Fatal(err)
				}
				md, err := m.Encode(kind, data)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(md.Free)
				ms = append(ms, md)
			}
			if pr.Image != "" {
				add(MediaImage, pr.Image+".png")
			}
			if pr.Audio != "" {
				add(MediaAudio, pr.Audio+".wav")
			}
			got, spans, err := m.Tokens.Expand(collapse(pr.IDs, m.Tokens), ms)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, pr.IDs) {
				t.Fatalf("expanded %v\nprocessor %v", got, pr.IDs)
			}
			loc, err := m.Tokens.Locate(pr.IDs, ms)
			if err != nil {
				t.Fatal(err)
			}
			for i := range spans {
				if spans[i].Start != loc[i].Start {
					t.Fatalf("span %d at %d, located at %d", i, spans[i].Start, loc[i].Start)
				}
			}
			if _, _, err := m.Tokens.Expand(collapse(pr.IDs, m.Tokens), ms[:len(ms)-1]); !errors.Is(err, ErrNoMedia) {
				t.Fatalf("one medium short: %v", err)
			}
		})
	}
}

func TestGemma4EncodeErrors(t *testing.T) {
	m := loadMMMedia(t)
	if _, err := m.EncodeImage([]byte("not an image")); !errors.Is(err, media.ErrUnsupported) {
		t.Fatalf("text as image: %v", err)
	}
	png, err := os.ReadFile(filepath.Join(mmFixture, "media", "a.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.EncodeImage(png[:100]); !errors.Is(err, media.ErrCorrupt) {
		t.Fatalf("truncated PNG: %v", err)
	}
	if _, err := m.EncodeAudio(png); !errors.Is(err, media.ErrUnsupported) {
		t.Fatalf("PNG as audio: %v", err)
	}
	if _, err := LoadGemma4Media(filepath.Join("testdata", "gemma4_dense", "f32"), nil); !errors.Is(err, ErrNoMedia) {
		t.Fatalf("text-only checkpoint: %v", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
