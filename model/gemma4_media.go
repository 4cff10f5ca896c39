package model

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// ErrNoMedia is returned when media is given to a model (or a checkpoint)
// without the tower for it.
var ErrNoMedia = errors.New("model takes no such media")

// Gemma4Tokens are the special token ids of Gemma 4's multimodal prompts
// (Gemma4Config's), and the text model's pad id that placeholder rows
// carry into the per-layer input lookup.
type Gemma4Tokens struct {
	Image, BOI, EOI int32
	Audio, BOA, EOA int32
	Pad             int32
}

// Gemma4Media holds a Gemma 4 checkpoint's multimodal parts: the vision
// and audio towers with their projections (either may be nil), the
// processors' configs, and the prompt's special tokens. It reads the same
// checkpoint as the text model, under the multimodal wrapper's prefixes
// (model.vision_tower., model.embed_vision., model.audio_tower.,
// model.embed_audio.; or the same without model.).
type Gemma4Media struct {
	Vision *Gemma4Vision
	Audio  *Gemma4Audio
	Tokens Gemma4Tokens
	// ImageConfig is the image processor's config.
	ImageConfig media.Gemma4ImageConfig
	// AudioConfig is the audio feature extractor's config.
	AudioConfig media.Gemma4AudioConfig
	// AudioMaxTokens caps an audio clip's soft tokens (audio_seq_length).
	AudioMaxTokens int
	// BidirectionalVision is the text config's use_bidirectional_attention
	// "vision" (the larger Gemma 4 models): each image's soft tokens
	// attend to one another in both directions on the sliding layers, as
	// transformers 5.17's block_sequence_ids mask does. Encode marks such
	// images' Mediums Bidirectional, and PromptMedia passes their blocks
	// to the model (ForwardOptions.Blocks).
	BidirectionalVision bool
	w                   *Weights
	set                 *safetensors.Set
}

// gemma4MMConfig is the multimodal wrapper's config.json.
type gemma4MMConfig struct {
	Text   json.RawMessage `json:"text_config"`
	Vision json.RawMessage `json:"vision_config"`
	Audio  json.RawMessage `json:"audio_config"`
	Image  *int32          `json:"image_token_id"`
	BOI    *int32          `json:"boi_token_id"`
	EOI    *int32          `json:"eoi_token_id"`
	AudioT *int32          `json:"audio_token_id"`
	BOA    *int32          `json:"boa_token_id"`
	EOA    *int32          `json:"eoa_token_id"`
	EOAIdx *int32          `json:"eoa_token_index"`
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// LoadGemma4Media opens the towers of the Gemma 4 checkpoint in dir. A
// checkpoint without vision_config and audio_config (a text-only model) is
// an ErrNoMedia error. opts' Backend, Copy and DType apply as for Load.
func LoadGemma4Media(dir string, opts *LoadOptions) (*Gemma4Media, error) {
	if opts == nil {
		opts = &LoadOptions{}
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg.ModelType != "gemma4" {
		return nil, fmt.Errorf("model: %s: %w: model_type %q has no Gemma 4 towers", dir, ErrNoMedia, cfg.ModelType)
	}
	var mc gemma4MMConfig
	if err := cfg.Decode(&mc); err != nil {
		return nil, err
	}
	if !present(mc.Vision) && !present(mc.Audio) {
		return nil, fmt.Errorf("model: %s: %w: the config has no vision_config or audio_config", dir, ErrNoMedia)
	}
	tc, err := parseGemma4Config(cfg)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	tok := gemma4TokensOf(&mc)
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w: %w", ErrCheckpoint, err)
	}
	m := &Gemma4Media{Tokens: tok, set: set, AudioMaxTokens: 750}
	m.BidirectionalVision = tc.Bidirectional != nil && *tc.Bidirectional == "vision"
	if err := m.build(&mc, cfg, tc.Hidden, opts); err != nil {
		m.Close()
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	if m.Vision != nil {
		if m.ImageConfig, err = media.ReadGemma4ImageConfig(dir); err != nil {
			m.Close()
			return nil, err
		}
		if m.ImageConfig.PatchSize != m.Vision.cfg.Patch || m.ImageConfig.PoolingKernel != m.Vision.cfg.Pool {
			m.Close()
			return nil, fmt.Errorf("model: %s: %w: image processor patch %d / pool %d, vision tower %d / %d", dir, ErrCheckpoint,
				m.ImageConfig.PatchSize, m.ImageConfig.PoolingKernel, m.Vision.cfg.Patch, m.Vision.cfg.Pool)
		}
	}
	if m.Audio != nil {
		if m.AudioConfig, err = media.ReadGemma4AudioConfig(dir); err != nil {
			m.Close()
			return nil, err
		}
		var seq struct {
			N int `json:"audio_seq_length"`
		}
		if _, err := media.ReadProcessorSection(dir, "", &seq); err == nil && seq.N > 0 {
			m.AudioMaxTokens = seq.N
		}
	}
	return m, nil
}

// firstPrefix is the first of prefixes under which the checkpoint stores
// name ("" when none does).
func firstPrefix(set *safetensors.Set, name string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if set.Has(p+name) || set.Has(p+name+".weight") || set.Has(p+name+".scales") {
			return p, true
		}
	}
	return "", false
}

func (m *Gemma4Media) build(mc *gemma4MMConfig, cfg *Config, textHidden int, opts *LoadOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if le, ok := r.(loadError); ok {
				err = le.err
			} else {
				err = tensor.Try(func() { panic(r) })
			}
		}
	}()
	if e := tensor.Try(func() { m.w = NewWeights(m.set, cfg.Quant, opts.Backend, opts.Copy) }); e != nil {
		return e
	}
	m.w.cast = opts.DType
	if present(mc.Vision) {
		vc, err := parseGemma4VisionConfig(mc.Vision)
		if err != nil {
			return err
		}
		tp, ok := firstPrefix(m.set, "patch_embedder.position_embedding_table", "model.vision_tower.", "vision_tower.", "model.vision_model.", "vision_model.")
		if !ok {
			return fmt.Errorf("%w: vision_config is set but no vision tower is stored (patch_embedder.position_embedding_table)", ErrCheckpoint)
		}
		ep, ok := firstPrefix(m.set, "embedding_projection", "model.embed_vision.", "embed_vision.")
		if !ok {
			return fmt.Errorf("%w: no embed_vision.embedding_projection for the vision tower", ErrCheckpoint)
		}
		m.Vision = loadGemma4Vision(m.w, vc, tp, ep, textHidden)
	}
	if present(mc.Audio) {
		ac, err := parseGemma4AudioConfig(mc.Audio)
		if err != nil {
			return err
		}
		tp, ok := firstPrefix(m.set, "subsample_conv_projection.input_proj_linear", "model.audio_tower.", "audio_tower.", "model.audio_model.", "audio_model.")
		if ok {
			ep, ok := firstPrefix(m.set, "embedding_projection", "model.embed_audio.", "embed_audio.")
			if !ok {
				return fmt.Errorf("%w: no embed_audio.embedding_projection for the audio tower", ErrCheckpoint)
			}
			m.Audio = loadGemma4Audio(m.w, ac, tp, ep, textHidden)
		}
	}
	return nil
}

// Close frees the towers and closes the checkpoint.
func (m *Gemma4Media) Close() error {
	if m == nil {
		return nil
	}
	if m.w != nil {
		m.w.Free()
		m.w = nil
	}
	if m.set != nil {
		err := m.set.Close()
		m.set = nil
		return err
	}
	return nil
}

// MediaSpan is one medium's soft-token embeddings [n, D] (a tower's
// projected output) and the prompt position of its first placeholder.
// Bidirectional spans are blocks whose rows attend to one another (an
// image on a BidirectionalVision model).
type MediaSpan struct {
	Start         int
	Embeds        *tensor.Array
	Bidirectional bool
}

// PromptMedia is a prompt's multimodal rows: embeddings that replace the
// token embeddings of the placeholder positions, laid out over the whole
// prompt so that any prefill chunk can take its slice.
type PromptMedia struct {
	// Embeddings is [1, L, D] in the model's dtype, zero outside media rows.
	Embeddings *tensor.Array
	// Mask marks the media rows (len L).
	Mask []bool
	// Pad is the id fed in place of a placeholder: transformers looks the
	// pad token up in the per-layer input table at media rows.
	Pad int32
	// Blocks is each position's bidirectional block (-1: none), nil when
	// no span is Bidirectional.
	Blocks []int32
	be     tensor.Backend
}

// NewPromptMedia lays spans over a prompt of length promptLen for a model
// of width dim and activation dtype dt on be. Spans must not overlap and
// must fit in the prompt.
func NewPromptMedia(be tensor.Backend, promptLen, dim int, dt tensor.DType, spans []MediaSpan, pad int32) (pm *PromptMedia, err error) {
	if be == nil {
		be = tensor.Default()
	}
	mask := make([]bool, promptLen)
	var blocks []int32
	for bi, s := range spans {
		if s.Embeds == nil || s.Embeds.NDim() != 2 || s.Embeds.Dim(1) != dim {
			return nil, fmt.Errorf("%w: media embeddings must be [n, %d]", tensor.ErrShape, dim)
		}
		n := s.Embeds.Dim(0)
		if s.Start < 0 || s.Start+n > promptLen {
			return nil, fmt.Errorf("%w: media rows [%d, %d) outside a %d-token prompt", tensor.ErrArgument, s.Start, s.Start+n, promptLen)
		}
		for i := s.Start; i < s.Start+n; i++ {
			if mask[i] {
				return nil, fmt.Errorf("%w: media spans overlap at position %d", tensor.ErrArgument, i)
			}
			mask[i] = true
		}
		if s.Bidirectional {
			if blocks == nil {
				blocks = make([]int32, promptLen)
				for i := range blocks {
					blocks[i] = -1
				}
			}
			for i := s.Start; i < s.Start+n; i++ {
				blocks[i] = int32(bi)
			}
		}
	}
	err = tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		var parts []*tensor.Array
		at := 0
		zeros := func(n int) {
			if n > 0 {
				parts = append(parts, tensor.FullOn(be, []int{n, dim}, 0, dt))
			}
		}
		sorted := append([]MediaSpan(nil), spans...)
		for i := 1; i < len(sorted); i++ {
			for j := i; j > 0 && sorted[j].Start < sorted[j-1].Start; j-- {
				sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
			}
		}
		for _, s := range sorted {
			zeros(s.Start - at)
			parts = append(parts, tensor.AsType(s.Embeds, dt))
			at = s.Start + s.Embeds.Dim(0)
		}
		zeros(promptLen - at)
		var all *tensor.Array
		if len(parts) == 1 {
			all = parts[0]
		} else {
			all = tensor.Concatenate(parts, 0)
		}
		all = tensor.Reshape(all, 1, promptLen, dim)
		tensor.Eval(all)
		pm = &PromptMedia{Embeddings: sc.Keep(all), Mask: mask, Pad: pad, Blocks: blocks, be: be}
	})
	if err == nil {
		tensor.Detach(pm.Embeddings)
	}
	return pm, err
}

// Free releases the embeddings.
func (p *PromptMedia) Free() {
	if p != nil && p.Embeddings != nil {
		p.Embeddings.Free()
		p.Embeddings = nil
	}
}

// Wrap returns m with p's rows merged into every forward pass that covers
// them: the pass's position is its caches' offset (a batched pass over
// several rows' caches is not supported), placeholder ids become p.Pad,
// and ForwardOptions carries the pass's slice of the embeddings and
// mask (and of Blocks: a pass that would cut a block in two is an error;
// PrefillChunk gives a chunk size that does not). Passes past the prompt
// (decoding) go through unchanged.
func (p *PromptMedia) Wrap(m Model) Model { return &mediaModel{Model: m, p: p} }

// PrefillChunk is a prefill chunk size for a prompt with p's media: chunk
// itself, or, when p has bidirectional blocks (which a pass must hold
// whole), the whole prompt's length if that is larger.
func (p *PromptMedia) PrefillChunk(chunk int) int {
	if p == nil || p.Blocks == nil {
		return chunk
	}
	return max(chunk, len(p.Blocks))
}

type mediaModel struct {
	Model
	p *PromptMedia
}

func cachesOffset(caches []kv.Cache) int {
	for _, c := range caches {
		if c != nil {
			return c.Offset()
		}
	}
	return 0
}

// Forward implements Model, merging the prompt's media rows (see Wrap).
func (mm *mediaModel) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) (out *tensor.Array, err error) {
	p := mm.p
	off, t := cachesOffset(caches), ids.Dim(1)
	hit := false
	for i := off; i < min(off+t, len(p.Mask)); i++ {
		hit = hit || p.Mask[i]
	}
	if !hit || ids.Dim(0) != 1 || opts != nil && opts.Embeddings != nil {
		return mm.Model.Forward(ids, caches, opts)
	}
	if p.Blocks != nil {
		end := min(off+t, len(p.Blocks))
		if off > 0 && p.Blocks[off] >= 0 && p.Blocks[off-1] == p.Blocks[off] ||
			end < len(p.Blocks) && p.Blocks[end-1] >= 0 && p.Blocks[end] == p.Blocks[end-1] {
			return nil, fmt.Errorf("%w: a forward pass over positions [%d, %d) cuts an image's bidirectional block; prefill it in one pass (PromptMedia.PrefillChunk)", tensor.ErrArgument, off, off+t)
		}
	}
	var o ForwardOptions
	if p.Blocks != nil {
		o.Blocks = make([]int32, t)
		for i := range t {
			o.Blocks[i] = -1
			if off+i < len(p.Blocks) {
				o.Blocks[i] = p.Blocks[off+i]
			}
		}
	}
	var ids2 *tensor.Array
	err = tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		end := min(off+t, len(p.Mask))
		keep := make([]byte, t)
		sel := make([]byte, t)
		for i := range t {
			if off+i < end && p.Mask[off+i] {
				sel[i] = 1
			} else {
				keep[i] = 1
			}
		}
		emb := tensor.SliceAxis(p.Embeddings, 1, off, end)
		if end-off < t {
			emb = tensor.Concatenate([]*tensor.Array{emb, tensor.FullOn(p.be, []int{1, off + t - end, emb.Dim(2)}, 0, emb.DType())}, 1)
		}
		keepA := tensor.FromBytesOn(p.be, keep, []int{1, t}, tensor.Bool, false)
		o.EmbedMask = sc.Keep(tensor.FromBytesOn(p.be, sel, []int{1, t}, tensor.Bool, false))
		o.Embeddings = sc.Keep(emb)
		ids2 = sc.Keep(tensor.WhereScalar(keepA, ids, float64(p.Pad)))
	})
	if err != nil {
		return nil, err
	}
	defer tensor.Free(o.Embeddings, o.EmbedMask, ids2)
	return mm.Model.Forward(ids2, caches, &o)
}

// MediaKind is an input medium's kind.
type MediaKind int

// Media kinds.
const (
	MediaImage MediaKind = iota
	MediaAudio
)

// String names the kind ("image", "audio").
func (k MediaKind) String() string {
	if k == MediaAudio {
		return "audio"
	}
	return "image"
}

// Medium is an encoded image or audio clip: its soft-token embeddings in
// the text model's space [Tokens, D]. Bidirectional media (images on a
// BidirectionalVision model) are blocks whose rows attend to one another.
type Medium struct {
	Kind          MediaKind
	Embeds        *tensor.Array
	Tokens        int
	Bidirectional bool
}

// Free releases the embeddings.
func (m *Medium) Free() {
	if m != nil && m.Embeds != nil {
		m.Embeds.Free()
		m.Embeds = nil
	}
}

// ReadGemma4Tokens reads the multimodal special tokens from dir's
// config.json (Gemma 4's defaults where it names none).
func ReadGemma4Tokens(dir string) (Gemma4Tokens, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return Gemma4Tokens{}, err
	}
	var mc gemma4MMConfig
	if err := cfg.Decode(&mc); err != nil {
		return Gemma4Tokens{}, err
	}
	return gemma4TokensOf(&mc), nil
}

func gemma4TokensOf(mc *gemma4MMConfig) Gemma4Tokens {
	var pad struct {
		Pad *int32 `json:"pad_token_id"`
	}
	if present(mc.Text) {
		_ = json.Unmarshal(mc.Text, &pad)
	}
	tok := Gemma4Tokens{Image: 258880, BOI: 255999, EOI: 258882, Audio: 258881, BOA: 256000, EOA: 258883}
	for _, f := range []struct {
		dst *int32
		src *int32
	}{{&tok.Image, mc.Image}, {&tok.BOI, mc.BOI}, {&tok.EOI, mc.EOI}, {&tok.Audio, mc.AudioT}, {&tok.BOA, mc.BOA}, {&tok.EOA, mc.EOAIdx}, {&tok.EOA, mc.EOA}, {&tok.Pad, pad.Pad}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return tok
}

// PreparedMedium is a medium decoded and preprocessed on the host (its
// soft-token count known), not yet run through its tower.
type PreparedMedium struct {
	Kind   MediaKind
	Tokens int
	img    *media.Gemma4Image
	feat   *media.Gemma4Features
	m      *Gemma4Media
}

// Shape is the medium as Expand and Locate read it (no embeddings yet).
func (p *PreparedMedium) Shape() *Medium {
	return &Medium{Kind: p.Kind, Tokens: p.Tokens, Bidirectional: p.Kind == MediaImage && p.m.BidirectionalVision}
}

// Prepare decodes and preprocesses a medium without running a tower:
// images (PNG, JPEG, GIF, WebP) as Gemma4ImageProcessor does, audio (WAV)
// resampled to the feature extractor's rate and turned into its log-mel
// features (30 s at most; the soft tokens are capped at AudioMaxTokens).
// Errors wrap media.ErrUnsupported, media.ErrCorrupt, media.ErrTooLarge
// (bad input) or ErrNoMedia (no tower for the kind).
func (m *Gemma4Media) Prepare(kind MediaKind, data []byte) (*PreparedMedium, error) {
	p := &PreparedMedium{Kind: kind, m: m}
	switch kind {
	case MediaImage:
		if m.Vision == nil {
			return nil, fmt.Errorf("%w: this model has no vision tower", ErrNoMedia)
		}
		rgb, err := media.DecodeImage(data)
		if err != nil {
			return nil, err
		}
		if p.img, err = media.Gemma4Preprocess(rgb, m.ImageConfig); err != nil {
			return nil, err
		}
		p.Tokens = m.Vision.SoftTokens(p.img)
	case MediaAudio:
		if m.Audio == nil {
			return nil, fmt.Errorf("%w: this model has no audio tower", ErrNoMedia)
		}
		a, err := media.DecodeWAV(data)
		if err != nil {
			return nil, err
		}
		if p.feat, err = media.Gemma4LogMel(media.Resample(a, m.AudioConfig.SamplingRate).Samples, m.AudioConfig); err != nil {
			return nil, err
		}
		p.Tokens = p.feat.SoftTokens()
		if m.AudioMaxTokens > 0 {
			p.Tokens = min(p.Tokens, m.AudioMaxTokens)
		}
		if p.Tokens == 0 {
			return nil, fmt.Errorf("%w: audio too short for one soft token", media.ErrCorrupt)
		}
	default:
		return nil, fmt.Errorf("%w: media kind %d", ErrNoMedia, kind)
	}
	return p, nil
}

// Encode runs the prepared medium through its tower and projection.
func (p *PreparedMedium) Encode() (*Medium, error) {
	var tower *tensor.Array
	var err error
	var proj func(*tensor.Array) (*tensor.Array, error)
	if p.Kind == MediaImage {
		tower, err = p.m.Vision.Tower(p.img)
		proj = p.m.Vision.Project
	} else {
		tower, err = p.m.Audio.Tower(p.feat)
		proj = p.m.Audio.Project
	}
	if err != nil {
		return nil, err
	}
	defer tower.Free()
	emb, err := proj(tower)
	if err != nil {
		return nil, err
	}
	if emb.Dim(0) > p.Tokens {
		var cut *tensor.Array
		if err := tensor.Try(func() {
			cut = tensor.Contiguous(tensor.SliceAxis(emb, 0, 0, p.Tokens))
			tensor.Eval(cut)
		}); err != nil {
			emb.Free()
			return nil, err
		}
		emb.Free()
		emb = cut
	}
	tensor.Detach(emb)
	return &Medium{Kind: p.Kind, Embeds: emb, Tokens: emb.Dim(0), Bidirectional: p.Kind == MediaImage && p.m.BidirectionalVision}, nil
}

// EncodeImage prepares and encodes an image file (see Prepare).
func (m *Gemma4Media) EncodeImage(data []byte) (*Medium, error) { return m.Encode(MediaImage, data) }

// EncodeAudio prepares and encodes a WAV file (see Prepare).
func (m *Gemma4Media) EncodeAudio(data []byte) (*Medium, error) { return m.Encode(MediaAudio, data) }

// Encode prepares and encodes one medium of the given kind.
func (m *Gemma4Media) Encode(kind MediaKind, data []byte) (*Medium, error) {
	p, err := m.Prepare(kind, data)
	if err != nil {
		return nil, err
	}
	return p.Encode()
}

func (t Gemma4Tokens) placeholder(k MediaKind) (open, ph, end int32) {
	if k == MediaAudio {
		return t.BOA, t.Audio, t.EOA
	}
	return t.BOI, t.Image, t.EOI
}

// Expand replaces each placeholder token of ids (the image or audio
// token, as a chat template or a prompt writes it) with the next
// medium's run, as Gemma4Processor does: begin token, Tokens soft-token
// placeholders, end token. Placeholders take media in order and must
// agree in kind and number. It returns the expanded ids and where each
// medium's rows start.
func (t Gemma4Tokens) Expand(ids []int32, media []*Medium) ([]int32, []MediaSpan, error) {
	out := make([]int32, 0, len(ids))
	var spans []MediaSpan
	next := 0
	for _, id := range ids {
		if id != t.Image && id != t.Audio {
			out = append(out, id)
			continue
		}
		kind := MediaImage
		if id == t.Audio {
			kind = MediaAudio
		}
		if next >= len(media) {
			return nil, nil, fmt.Errorf("%w: the prompt has more media placeholders than the %d media given", ErrNoMedia, len(media))
		}
		md := media[next]
		if md.Kind != kind {
			return nil, nil, fmt.Errorf("%w: placeholder %d is for %s but medium %d is %s", ErrNoMedia, next, kind, next, md.Kind)
		}
		open, ph, end := t.placeholder(kind)
		out = append(out, open)
		spans = append(spans, MediaSpan{Start: len(out), Embeds: md.Embeds, Bidirectional: md.Bidirectional})
		for range md.Tokens {
			out = append(out, ph)
		}
		out = append(out, end)
		next++
	}
	if next != len(media) {
		return nil, nil, fmt.Errorf("%w: %d media given but the prompt has %d placeholders", ErrNoMedia, len(media), next)
	}
	return out, spans, nil
}

// Locate finds, in ids already expanded (token ids given as is), each
// medium's run of placeholder ids, in order: a run must have exactly the
// medium's soft-token count.
func (t Gemma4Tokens) Locate(ids []int32, media []*Medium) ([]MediaSpan, error) {
	var spans []MediaSpan
	next := 0
	for i := 0; i < len(ids); {
		if ids[i] != t.Image && ids[i] != t.Audio {
			i++
			continue
		}
		kind := MediaImage
		if ids[i] == t.Audio {
			kind = MediaAudio
		}
		j := i
		for j < len(ids) && ids[j] == ids[i] {
			j++
		}
		if next >= len(media) {
			return nil, fmt.Errorf("%w: the ids hold more media runs than the %d media given", ErrNoMedia, len(media))
		}
		md := media[next]
		if md.Kind != kind || md.Tokens != j-i {
			return nil, fmt.Errorf("%w: run %d is %d %s placeholders at position %d; medium %d is %s of %d soft tokens",
				ErrNoMedia, next, j-i, kind, i, next, md.Kind, md.Tokens)
		}
		spans = append(spans, MediaSpan{Start: i, Embeds: md.Embeds, Bidirectional: md.Bidirectional})
		next++
		i = j
	}
	if next != len(media) {
		return nil, fmt.Errorf("%w: %d media given but the ids hold %d runs", ErrNoMedia, len(media), next)
	}
	return spans, nil
}
