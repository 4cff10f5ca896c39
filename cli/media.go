package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
	"github.com/spf13/pflag"
)

// mediaArg is one --image or --audio file, in command-line order.
type mediaArg struct {
	kind model.MediaKind
	path string
}

// mediaFlag is a repeatable file flag that appends to a list shared by
// --image and --audio, so that the files keep the order they were given.
type mediaFlag struct {
	list *[]mediaArg
	kind model.MediaKind
}

// String lists the flag's files (pflag.Value).
func (m *mediaFlag) String() string {
	if m.list == nil {
		return ""
	}
	var s []string
	for _, a := range *m.list {
		if a.kind == m.kind {
			s = append(s, a.path)
		}
	}
	return strings.Join(s, ",")
}

// Set appends a file (pflag.Value).
func (m *mediaFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty file name")
	}
	*m.list = append(*m.list, mediaArg{kind: m.kind, path: v})
	return nil
}

// Type names the value in usage (pflag.Value).
func (m *mediaFlag) Type() string { return "file" }

// addMediaFlags registers --image and --audio.
func addMediaFlags(fl *pflag.FlagSet, list *[]mediaArg) {
	fl.Var(&mediaFlag{list: list, kind: model.MediaImage}, "image",
		"an image (PNG, JPEG, GIF, WebP) for a multimodal model (repeatable; media keep their command-line order)")
	fl.Var(&mediaFlag{list: list, kind: model.MediaAudio}, "audio",
		"a WAV audio clip for a multimodal model (repeatable)")
}

// mediaPlaceholders is the text a prompt gets in front of it for its
// media: each medium's placeholder token (<|image|>, <|audio|>) in order,
// which the processor's expansion then replaces by the medium's run.
func mediaPlaceholders(dir string, tok *tokenizer.Tokenizer, media []mediaArg) (string, error) {
	if len(media) == 0 {
		return "", nil
	}
	t, err := model.ReadGemma4Tokens(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range media {
		id := t.Image
		if m.kind == model.MediaAudio {
			id = t.Audio
		}
		s, ok := tok.Token(int(id))
		if !ok {
			return "", fmt.Errorf("the tokenizer has no %s placeholder token (id %d)", m.kind, id)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// withMedia encodes the media through the checkpoint's towers and returns
// the model with their embeddings merged at the prompt's placeholder rows,
// and the prompt ids: expanded from single placeholders, or, when asIs
// (--prompt-ids), used as they are (they must hold each medium's run).
// done frees what it made.
func withMedia(dir string, be tensor.Backend, m model.Model, ids []int32, media []mediaArg, asIs bool) (model.Model, []int32, func(), error) {
	mm, err := model.LoadGemma4Media(dir, &model.LoadOptions{Backend: be})
	if err != nil {
		if errors.Is(err, model.ErrNoMedia) {
			return nil, nil, nil, fmt.Errorf("%w: --image/--audio: %v", errUsage, err)
		}
		return nil, nil, nil, err
	}
	defer mm.Close()
	var encoded []*model.Medium
	free := func() {
		for _, e := range encoded {
			e.Free()
		}
	}
	for _, a := range media {
		data, err := os.ReadFile(a.path)
		if err != nil {
			free()
			return nil, nil, nil, fmt.Errorf("--%s: %w", a.kind, err)
		}
		e, err := mm.Encode(a.kind, data)
		if err != nil {
			free()
			return nil, nil, nil, fmt.Errorf("--%s %s: %w", a.kind, a.path, err)
		}
		encoded = append(encoded, e)
	}
	var spans []model.MediaSpan
	if asIs {
		spans, err = mm.Tokens.Locate(ids, encoded)
	} else {
		ids, spans, err = mm.Tokens.Expand(ids, encoded)
	}
	if err != nil {
		free()
		return nil, nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	info := m.Info()
	pm, err := model.NewPromptMedia(be, len(ids), info.Hidden, info.DType, spans, mm.Tokens.Pad)
	free()
	if err != nil {
		return nil, nil, nil, err
	}
	return pm.Wrap(m), ids, pm.Free, nil
}
