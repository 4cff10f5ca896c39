package serve

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// MediaModel is a Config.Model that also takes images and audio: a
// multimodal checkpoint's towers and processors beside the model whose
// forward passes merge their embeddings. Requests with image or audio
// content parts need one; other models answer them 400.
type MediaModel interface {
	generate.Model
	// Media is the checkpoint's towers, processor configs and special
	// tokens.
	Media() *model.Gemma4Media
	// Base is the model whose Forward takes embeddings to merge
	// (model.ForwardOptions).
	Base() model.Model
}

// Media limits: the decoded size of one image or clip, and media per
// request.
const (
	MaxMediaBytes    = 20 << 20
	MaxMediaPerInput = 16
)

// mediaByteLimit is the limit in force (MaxMediaBytes; tests lower it).
var mediaByteLimit = MaxMediaBytes

// mediaItem is one medium a request carries, with the parameter path that
// errors about it name.
type mediaItem struct {
	kind  model.MediaKind
	data  []byte
	param string
}

// mediaCollector gathers a request's media while its messages are read;
// each medium leaves its placeholder token in the message text, which the
// processor's expansion later replaces by the medium's run. A nil
// collector refuses media (endpoints that read text only).
type mediaCollector struct {
	items              []mediaItem
	mm                 MediaModel
	imageText, audText string      // placeholder token texts ("": the model takes none)
	fetch              *MediaFetch // nil: http(s) URLs are refused unfetched
}

// mediaCollector returns the collector for one request.
func (s *Server) mediaCollector() *mediaCollector {
	c := &mediaCollector{}
	mm, ok := s.cfg.Model.(MediaModel)
	if !ok || mm.Media() == nil || s.cfg.Tokenizer == nil {
		return c
	}
	c.mm = mm
	c.fetch = s.cfg.MediaFetch
	md := mm.Media()
	if md.Vision != nil {
		c.imageText, _ = s.cfg.Tokenizer.Token(int(md.Tokens.Image))
	}
	if md.Audio != nil {
		c.audText, _ = s.cfg.Tokenizer.Token(int(md.Tokens.Audio))
	}
	return c
}

// takes reports whether the model takes media of kind (c may be nil).
func (c *mediaCollector) takes(kind model.MediaKind) bool {
	if c == nil {
		return false
	}
	if kind == model.MediaAudio {
		return c.audText != ""
	}
	return c.imageText != ""
}

// refuse is the 400 for a part of a kind the model (or the endpoint)
// does not take.
func (c *mediaCollector) refuse(typ string, kind model.MediaKind, param string) error {
	if c == nil {
		return badRequest(param, "content parts of type %q are unsupported here (this endpoint reads text only)", typ)
	}
	return badRequest(param, "content parts of type %q are unsupported: this model takes no %s input", typ, kind)
}

// add records a medium and returns its placeholder text.
func (c *mediaCollector) add(kind model.MediaKind, data []byte, param string) (string, error) {
	ph := c.imageText
	if kind == model.MediaAudio {
		ph = c.audText
	}
	if ph == "" {
		return "", badRequest(param, "this model takes no %s input", kind)
	}
	if len(c.items) >= MaxMediaPerInput {
		return "", badRequest(param, "too many images and audio clips: at most %d per request", MaxMediaPerInput)
	}
	c.items = append(c.items, mediaItem{kind: kind, data: data, param: param})
	return ph, nil
}

// decodeBase64 decodes standard or URL-safe base64, padded or not,
// ignoring whitespace, refusing what would decode to more than
// MaxMediaBytes.
func decodeBase64(s, param string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
			return -1
		}
		return r
	}, s)
	if len(s)/4*3 > mediaByteLimit+3 {
		return nil, badRequest(param, "media too large: about %d bytes decoded (at most %d)", len(s)/4*3, mediaByteLimit)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) > mediaByteLimit {
				return nil, badRequest(param, "media too large: %d bytes (at most %d)", len(b), mediaByteLimit)
			}
			return b, nil
		}
	}
	return nil, badRequest(param, "corrupt media: the data is not valid base64")
}

// mediaURL reads a data: URL's bytes (base64 only), or fetches an http(s)
// URL when the server allows it (MediaFetch); otherwise remote URLs are
// refused unfetched.
func (c *mediaCollector) mediaURL(u, param string) ([]byte, error) {
	low := strings.ToLower(u)
	if (strings.HasPrefix(low, "http://") || strings.HasPrefix(low, "https://")) && c.fetch != nil {
		return c.fetch.fetch(u, param)
	}
	return decodeDataURL(u, param)
}

// decodeDataURL reads a data: URL's bytes (base64 only). Remote URLs are
// refused.
func decodeDataURL(u, param string) ([]byte, error) {
	low := strings.ToLower(u)
	switch {
	case strings.HasPrefix(low, "http://"), strings.HasPrefix(low, "https://"):
		return nil, badRequest(param, "remote media URLs are not fetched (the server runs without --allow-media-fetch): send the file inline as a data: URL (data:image/png;base64,...)")
	case !strings.HasPrefix(low, "data:"):
		return nil, badRequest(param, "unsupported media URL: want a data: URL (data:image/png;base64,...)")
	}
	meta, payload, ok := strings.Cut(u[len("data:"):], ",")
	if !ok {
		return nil, badRequest(param, "corrupt media: a data: URL needs a comma before its data")
	}
	if !strings.HasSuffix(strings.ToLower(meta), ";base64") {
		return nil, badRequest(param, "unsupported media URL: data: URLs must be base64 (data:image/png;base64,...)")
	}
	return decodeBase64(payload, param)
}

// openaiMediaPart reads an OpenAI image_url or input_audio content part
// into the collector and returns its placeholder text.
func (c *mediaCollector) openaiMediaPart(p contentPart, param string) (string, error) {
	kind := model.MediaImage
	if p.Type == "input_audio" {
		kind = model.MediaAudio
	}
	if !c.takes(kind) {
		return "", c.refuse(p.Type, kind, param+".type")
	}
	switch p.Type {
	case "image_url", "input_image":
		raw := p.ImageURL
		var url string
		var obj struct {
			URL *string `json:"url"`
		}
		switch {
		case json.Unmarshal(raw, &url) == nil:
		case json.Unmarshal(raw, &obj) == nil && obj.URL != nil:
			url = *obj.URL
		default:
			return "", badRequest(param+".image_url", "an image_url part needs image_url: {url: \"data:image/...;base64,...\"}")
		}
		data, err := c.mediaURL(url, param+".image_url.url")
		if err != nil {
			return "", err
		}
		return c.add(model.MediaImage, data, param+".image_url")
	case "input_audio":
		var a struct {
			Data   *string `json:"data"`
			Format string  `json:"format"`
		}
		if json.Unmarshal(p.InputAudio, &a) != nil || a.Data == nil {
			return "", badRequest(param+".input_audio", "an input_audio part needs input_audio: {data: base64, format: \"wav\"}")
		}
		if f := strings.ToLower(a.Format); f != "" && f != "wav" {
			return "", badRequest(param+".input_audio.format", "unsupported media format: %q audio (this server reads wav)", a.Format)
		}
		data, err := decodeBase64(*a.Data, param+".input_audio.data")
		if err != nil {
			return "", err
		}
		return c.add(model.MediaAudio, data, param+".input_audio")
	}
	return "", badRequest(param+".type", "content parts of type %q are unsupported", p.Type)
}

// anthropicImage reads an Anthropic image block ({type: image, source:
// {type: base64, media_type, data}}) into the collector.
func (c *mediaCollector) anthropicImage(b anthropicBlock, param string) (string, error) {
	if !c.takes(model.MediaImage) {
		return "", c.refuse(b.Type, model.MediaImage, param+".type")
	}
	var src struct {
		Type      string  `json:"type"`
		MediaType string  `json:"media_type"`
		Data      *string `json:"data"`
		URL       string  `json:"url"`
	}
	if absent(b.Source) || json.Unmarshal(b.Source, &src) != nil {
		return "", badRequest(param+".source", "an image block needs source: {type: base64, media_type, data}")
	}
	switch src.Type {
	case "base64":
	case "url":
		if c.fetch == nil {
			return "", badRequest(param+".source.type", "remote media URLs are not fetched (the server runs without --allow-media-fetch): send the image as a base64 source")
		}
		data, err := c.fetch.fetch(src.URL, param+".source.url")
		if err != nil {
			return "", err
		}
		return c.add(model.MediaImage, data, param+".source")
	default:
		return "", badRequest(param+".source.type", "unsupported image source type %q (want base64)", src.Type)
	}
	if src.Data == nil {
		return "", badRequest(param+".source.data", "a base64 image source needs data")
	}
	data, err := decodeBase64(*src.Data, param+".source.data")
	if err != nil {
		return "", err
	}
	return c.add(model.MediaImage, data, param+".source")
}

// planMedia is a plan's media, preprocessed, and where each one's rows
// start in the expanded prompt.
type planMedia struct {
	mm       MediaModel
	prepared []*model.PreparedMedium
	starts   []int
	// key names the media (a hash of their kinds and bytes, in order):
	// on the batched lane it joins the prefix cache's namespace, so that
	// placeholder ids standing for other media never match.
	key string
}

// mediaError maps a preprocessing failure to a 400 naming the medium.
func mediaError(err error, param string) error {
	reason := "bad media"
	switch {
	case errors.Is(err, media.ErrUnsupported):
		reason = "unsupported media format"
	case errors.Is(err, media.ErrCorrupt):
		reason = "corrupt media"
	case errors.Is(err, media.ErrTooLarge):
		reason = "media too large"
	case errors.Is(err, model.ErrNoMedia):
		reason = "media this model cannot take"
	}
	msg := err.Error()
	for _, p := range []string{"unsupported media format: ", "corrupt media: ", "media too large: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return badRequest(param, "%s: %s", reason, msg)
}

// expandMedia preprocesses the collected media and expands their
// placeholders in ids as Gemma4Processor does. It returns ids unchanged
// (and no planMedia) when the request carries none.
func (s *Server) expandMedia(ids []int32, c *mediaCollector, param string) ([]int32, *planMedia, error) {
	if c == nil || len(c.items) == 0 {
		return ids, nil, nil
	}
	md := c.mm.Media()
	pm := &planMedia{mm: c.mm}
	shapes := make([]*model.Medium, len(c.items))
	h := sha256.New()
	for _, it := range c.items {
		var hdr [9]byte
		hdr[0] = byte(it.kind)
		binary.LittleEndian.PutUint64(hdr[1:], uint64(len(it.data)))
		h.Write(hdr[:])
		h.Write(it.data)
	}
	pm.key = hex.EncodeToString(h.Sum(nil))
	for i, it := range c.items {
		p, err := md.Prepare(it.kind, it.data)
		if err != nil {
			return nil, nil, mediaError(err, it.param)
		}
		pm.prepared = append(pm.prepared, p)
		shapes[i] = p.Shape()
	}
	out, spans, err := md.Tokens.Expand(ids, shapes)
	if err != nil {
		return nil, nil, badRequest(param, "the prompt's media placeholders do not match the media: %v", err)
	}
	for _, sp := range spans {
		pm.starts = append(pm.starts, sp.Start)
	}
	return out, pm, nil
}

// mediaFn is a media job's work on the engine goroutine: the towers run on
// the prepared media, and the prompt generates through a model that
// merges their embeddings at the placeholder rows. On the serial lane it
// runs alone and never touches the prompt cache (a cached prefix keyed by
// token ids would not tell one image from another). On the batched lane
// it also sets j.rowMedia, so the job becomes a batch row (mediaRow)
// whose prefix-cache namespace holds the media's hash (after its adapter
// set's) — except for bidirectional images (whose blocks a batched pass
// does not take) and adapter requests on a lane whose model takes no
// embeddings per row, which run the serial way.
func (s *Server) mediaFn(j *job, pm *planMedia) func() {
	if s.eng != nil && s.eng.lane != nil && (len(j.opts.Adapters) == 0 || s.mediaRowsAdapted()) && !slices.ContainsFunc(pm.prepared, func(p *model.PreparedMedium) bool { return p.Shape().Bidirectional }) {
		j.rowMedia = func() (*generate.RowEmbeds, string, func(), error) { return s.mediaRow(j, pm) }
	}
	return func() {
		res := s.runMedia(j, pm)
		j.out.push(event{done: &res})
	}
}

// mediaRow runs the towers for a batched media row and lays their
// embeddings over the prompt (generate.RowEmbeds); free releases them.
func (s *Server) mediaRow(j *job, pm *planMedia) (*generate.RowEmbeds, string, func(), error) {
	var enc []*model.Medium
	defer func() {
		for _, m := range enc {
			m.Free()
		}
	}()
	spans := make([]model.MediaSpan, len(pm.prepared))
	for i, p := range pm.prepared {
		if err := j.ctx.Err(); err != nil {
			return nil, "", nil, err
		}
		m, err := p.Encode()
		if err != nil {
			return nil, "", nil, fmt.Errorf("encoding medium %d: %w", i, err)
		}
		enc = append(enc, m)
		spans[i] = model.MediaSpan{Start: pm.starts[i], Embeds: m.Embeds}
	}
	base := pm.mm.Base()
	info := base.Info()
	prm, err := model.NewPromptMedia(s.cfg.Backend, len(j.prompt), info.Hidden, info.DType, spans, pm.mm.Media().Tokens.Pad)
	if err != nil {
		return nil, "", nil, err
	}
	return &generate.RowEmbeds{Embeddings: prm.Embeddings, Mask: prm.Mask, Pad: prm.Pad, Forwarder: embedForwarder{base}}, pm.key, prm.Free, nil
}

// embedForwarder runs a batched pass with media embeddings through the
// model's ForwardOptions.
type embedForwarder struct{ m model.Model }

// ForwardEmbeds implements generate.EmbedForwarder.
func (f embedForwarder) ForwardEmbeds(ids *tensor.Array, caches []kv.Cache, emb, mask *tensor.Array) (*tensor.Array, error) {
	return f.m.Forward(ids, caches, &model.ForwardOptions{Embeddings: emb, EmbedMask: mask})
}

// addMedia puts a media job in the batch as a row with its prompt
// embeddings (the towers run now, on the engine goroutine); its prefix
// cache namespace gets the media's key, and its KV is not snapshotted to
// the SSD cache (whose files are keyed by token ids).
func (l *batchLane) addMedia(j *job, opts *generate.Options) (*generate.Row, func(), error) {
	emb, key, free, err := j.rowMedia()
	if err != nil {
		return nil, nil, err
	}
	opts.OnPrefillDone, opts.SnapshotAt = nil, 0
	opts.CacheNamespace += "\x00media:" + key
	row, err := l.b.AddEmbeds(j.ctx, j.prompt, opts, emb)
	if err != nil {
		free()
		return nil, nil, err
	}
	return row, free, nil
}

func (s *Server) runMedia(j *job, pm *planMedia) (res outcome) {
	res.lane = "serial"
	base, err := s.mediaBase(pm.mm, j.opts.Adapters)
	if err != nil {
		return outcome{err: err, lane: "serial"}
	}
	zero := 0
	j.out.push(event{cached: &zero})
	var enc []*model.Medium
	defer func() {
		for _, m := range enc {
			m.Free()
		}
	}()
	spans := make([]model.MediaSpan, len(pm.prepared))
	for i, p := range pm.prepared {
		if err := j.ctx.Err(); err != nil {
			return outcome{err: err, lane: "serial"}
		}
		m, err := p.Encode()
		if err != nil {
			return outcome{err: fmt.Errorf("encoding medium %d: %w", i, err), lane: "serial"}
		}
		enc = append(enc, m)
		spans[i] = model.MediaSpan{Start: pm.starts[i], Embeds: m.Embeds}
	}
	info := base.Info()
	prm, err := model.NewPromptMedia(s.cfg.Backend, len(j.prompt), info.Hidden, info.DType, spans, pm.mm.Media().Tokens.Pad)
	if err != nil {
		return outcome{err: err, lane: "serial"}
	}
	defer prm.Free()
	opts := j.opts
	opts.Caches, opts.OnPrefillDone, opts.Speculation = nil, nil, nil
	opts.PrefillChunkSize = prm.PrefillChunk(opts.PrefillChunkSize) // an image's bidirectional block stays in one pass
	st, stopStr, stopped, err := s.streamJob(j.ctx, j, generate.Wrap(prm.Wrap(base), info.Vocab), &opts)
	s.eng.record(st)
	res = outcome{stats: st, stopStr: stopStr, err: err, lane: "serial"}
	switch {
	case err != nil:
	case stopped || st.StopReason == generate.StopEOS || st.StopReason == generate.StopGrammar:
		res.reason = "stop"
	case st.StopReason == generate.StopLength:
		res.reason = "length"
	default:
		res.reason = "stop"
	}
	return res
}

// streamJob is the engine's generation loop for a job run by fn.
func (s *Server) streamJob(ctx context.Context, j *job, gm generate.Model, opts *generate.Options) (st generate.Stats, stopStr string, stopped bool, err error) {
	gs, err := generate.Generate(ctx, gm, j.prompt, opts)
	if err != nil {
		return st, "", false, err
	}
	defer gs.Close()
	detok := s.cfg.Tokenizer.NewDetokenizer(false)
	stopper := generate.NewStopMatcher(j.stops...)
	var pend []tokenLP
	var genErr error
	for t, e := range gs.Tokens() {
		if e != nil {
			genErr = e
			break
		}
		pend = append(pend, tokenLP{ID: t.ID, Logprob: t.Logprob, Top: t.Top})
		text, hit := stopper.Add(detok.Add(int(t.ID)))
		if text != "" || hit {
			j.out.push(event{text: text, tokens: pend})
			pend = nil
		}
		if hit {
			stopped = true
			break
		}
	}
	if !stopped && genErr == nil {
		text, hit := stopper.Add(detok.Flush())
		if !hit {
			text += stopper.Flush()
		}
		stopped = hit
		if text != "" || len(pend) > 0 {
			j.out.push(event{text: text, tokens: pend})
		}
	}
	return gs.Stats(), stopper.Matched(), stopped, genErr
}
