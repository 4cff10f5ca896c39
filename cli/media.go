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

// encodeMedia reads the media files and encodes them through the
// checkpoint's towers, in order. The caller frees the media.
func encodeMedia(dir string, be tensor.Backend, media []mediaArg) ([]*model.Medium, model.Gemma4Tokens, error) {
	mm, err := model.LoadGemma4Media(dir, &model.LoadOptions{Backend: be})
	if err != nil {
		if errors.Is(err, model.ErrNoMedia) {
			return nil, model.Gemma4Tokens{}, fmt.Errorf("%w: --image/--audio: %v", errUsage, err)
		}
		return nil, model.Gemma4Tokens{}, err
	}
	defer mm.Close()
	var encoded []*model.Medium
	for _, a := range media {
		data, err := os.ReadFile(a.path)
		if err == nil {
			var e *model.Medium
			if e, err = mm.Encode(a.kind, data); err == nil {
				encoded = append(encoded, e)
				continue
			}
			err = fmt.Errorf("%s: %w", a.path, err)
		}
		freeMedia(encoded)
		return nil, model.Gemma4Tokens{}, fmt.Errorf("--%s %w", a.kind, err)
	}
	return encoded, mm.Tokens, nil
}

func freeMedia(media []*model.Medium) {
	for _, e := range media {
		e.Free()
	}
}

// mergeMedia returns m with the encoded media's embeddings merged at the
// prompt's placeholder rows, and the prompt ids: expanded from single
// placeholders, or, when asIs (--prompt-ids), used as they are (they must
// hold each medium's run). chunk, when set, becomes a prefill chunk size
// that keeps each bidirectional image block in one pass. done frees what
// it made (not the media).
func mergeMedia(be tensor.Backend, m model.Model, tokens model.Gemma4Tokens, encoded []*model.Medium, ids []int32, asIs bool, chunk *int) (model.Model, []int32, func(), error) {
	var spans []model.MediaSpan
	var err error
	if asIs {
		spans, err = tokens.Locate(ids, encoded)
	} else {
		ids, spans, err = tokens.Expand(ids, encoded)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	info := m.Info()
	pm, err := model.NewPromptMedia(be, len(ids), info.Hidden, info.DType, spans, tokens.Pad)
	if err != nil {
		return nil, nil, nil, err
	}
	if chunk != nil {
		*chunk = pm.PrefillChunk(*chunk)
	}
	return pm.Wrap(m), ids, pm.Free, nil
}

// withMedia encodes the media and merges them into the prompt (see
// mergeMedia). done frees what it made.
func withMedia(dir string, be tensor.Backend, m model.Model, ids []int32, media []mediaArg, asIs bool, chunk *int) (model.Model, []int32, func(), error) {
	encoded, tokens, err := encodeMedia(dir, be, media)
	if err != nil {
		return nil, nil, nil, err
	}
	wm, ids, done, err := mergeMedia(be, m, tokens, encoded, ids, asIs, chunk)
	freeMedia(encoded)
	return wm, ids, done, err
}

// chatMedia is a chat session's media, encoded once: the first user
// message of each conversation carries their placeholders, and every
// turn's prompt (the whole rendered history) is expanded and given their
// embeddings. The media never change within a session, so the prompt
// cache's token-id keys cannot mix one image's KV with another's.
type chatMedia struct {
	be          tensor.Backend
	tokens      model.Gemma4Tokens
	media       []*model.Medium
	placeholder string
}

func newChatMedia(dir string, be tensor.Backend, tok *tokenizer.Tokenizer, media []mediaArg) (*chatMedia, error) {
	ph, err := mediaPlaceholders(dir, tok, media)
	if err != nil {
		return nil, err
	}
	encoded, tokens, err := encodeMedia(dir, be, media)
	if err != nil {
		return nil, err
	}
	return &chatMedia{be: be, tokens: tokens, media: encoded, placeholder: ph}, nil
}

func (c *chatMedia) free() {
	if c != nil {
		freeMedia(c.media)
		c.media = nil
	}
}
