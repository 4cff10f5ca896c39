package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/serve"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/spf13/pflag"
)

// servedMedia is the served model with its checkpoint's towers: a
// serve.MediaModel, so that requests may carry images and audio.
type servedMedia struct {
	generate.Model
	base  model.Model
	media *model.Gemma4Media
}

// Media implements serve.MediaModel.
func (s *servedMedia) Media() *model.Gemma4Media { return s.media }

// Base implements serve.MediaModel.
func (s *servedMedia) Base() model.Model { return s.base }

// ForwardOutputs implements generate.OutputForwarder: the text model's.
func (s *servedMedia) ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	return generate.ForwardOutputs(s.Model, ids, caches, pos)
}

// serveModel is the generate.Model the server runs: m with the
// checkpoint's vision and audio towers when it has any (a Gemma 4
// multimodal checkpoint), else m alone (also, with a warning, when the
// towers fail to load: text still serves). done closes the towers.
func serveModel(dir string, m model.Model, be tensor.Backend, log *slog.Logger) (generate.Model, func(), error) {
	gm := generate.Wrap(m, m.Info().Vocab)
	mm, err := model.LoadGemma4Media(dir, &model.LoadOptions{Backend: be})
	if errors.Is(err, model.ErrNoMedia) {
		return gm, func() {}, nil
	}
	if err != nil {
		// a checkpoint whose towers do not load still serves text
		if log != nil {
			log.Warn("image and audio input off: the checkpoint's towers did not load", "err", err)
		}
		return gm, func() {}, nil
	}
	if log != nil {
		log.Info("multimodal input", "image", mm.Vision != nil, "audio", mm.Audio != nil)
	}
	return &servedMedia{Model: gm, base: m, media: mm}, func() { mm.Close() }, nil
}

// mediaFetchFlags are serve's flags for media given as http(s) URLs.
type mediaFetchFlags struct {
	allow    bool
	timeout  time.Duration
	maxBytes int
}

// addMediaFetchFlags registers --allow-media-fetch and its limits.
func addMediaFetchFlags(fl *pflag.FlagSet) *mediaFetchFlags {
	f := &mediaFetchFlags{}
	fl.BoolVar(&f.allow, "allow-media-fetch", false, "fetch image_url / image source URLs given as http(s) (public addresses only); without it only data: URLs and base64 are read")
	fl.DurationVar(&f.timeout, "media-fetch-timeout", 10*time.Second, "time limit of one --allow-media-fetch fetch")
	fl.IntVar(&f.maxBytes, "media-fetch-max-bytes", serve.MaxMediaBytes, "size cap of one --allow-media-fetch fetch")
	return f
}

// policy is the server's MediaFetch (nil without --allow-media-fetch).
func (f *mediaFetchFlags) policy() *serve.MediaFetch {
	if f == nil || !f.allow {
		return nil
	}
	return &serve.MediaFetch{Timeout: f.timeout, MaxBytes: f.maxBytes}
}
