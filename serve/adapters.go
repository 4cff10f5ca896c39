package serve

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// AdapterModel is a model loaded through package lora as the generation
// loop sees it: a generate.Model whose Forward and Logits apply no
// adapter, and a generate.RowForwarder whose ForwardRows and LogitsRows
// apply each row's adapter set to that row alone (the base matmuls
// shared, each row's low-rank terms its own), so that rows with different
// adapters decode in one batch.
type AdapterModel struct {
	m     *lora.Model
	vocab int
}

// NewAdapterModel wraps m (its own selection is not used: rows name
// their sets).
func NewAdapterModel(m *lora.Model) *AdapterModel {
	return &AdapterModel{m: m, vocab: m.Info().Vocab}
}

// Forward implements generate.Model: the base model.
func (a *AdapterModel) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	return a.m.ForwardWith(lora.Selection{}, ids, caches, nil)
}

// ForwardOutputs implements generate.OutputForwarder: the base model,
// returning positions pos alone (model.ForwardOptions.Outputs).
func (a *AdapterModel) ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	return a.m.ForwardWith(lora.Selection{}, ids, caches, &model.ForwardOptions{Outputs: pos})
}

// Logits implements generate.Model: the base model's head.
func (a *AdapterModel) Logits(hidden *tensor.Array) (*tensor.Array, error) {
	return a.m.LogitsWith(lora.Selection{}, hidden)
}

// spans turns a pass's rows into a lora selection: consecutive rows with
// the same set share one span (one low-rank product over all their
// tokens), and a pass whose rows all run one set selects it for every
// row (no slicing at all). Rows compute the same either way: the
// backend's kernels give a row the same result whatever else a call
// holds.
func spans(rows []generate.RowSpan) lora.Selection {
	var sel lora.Selection
	for _, r := range rows {
		if n := len(sel.Spans); n > 0 && slices.Equal(sel.Spans[n-1].Set, r.Adapters) {
			sel.Spans[n-1].Rows += r.Tokens
			continue
		}
		sel.Spans = append(sel.Spans, lora.Span{Rows: r.Tokens, Set: r.Adapters})
	}
	if len(sel.Spans) == 1 {
		return lora.Selection{Set: sel.Spans[0].Set}
	}
	return sel
}

// ForwardRows implements generate.RowForwarder.
func (a *AdapterModel) ForwardRows(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan) (*tensor.Array, error) {
	return a.m.ForwardWith(spans(rows), ids, caches, nil)
}

// LogitsRows implements generate.RowForwarder.
func (a *AdapterModel) LogitsRows(hidden *tensor.Array, rows []generate.RowSpan) (*tensor.Array, error) {
	return a.m.LogitsWith(spans(rows), hidden)
}

// ForwardRowsEmbeds implements generate.RowEmbedForwarder: ForwardRows
// with media embeddings merged where mask is set (model.ForwardOptions),
// so image and audio rows join the batch with or beside adapter rows.
func (a *AdapterModel) ForwardRowsEmbeds(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan, emb, mask *tensor.Array) (*tensor.Array, error) {
	return a.m.ForwardWith(spans(rows), ids, caches, &model.ForwardOptions{Embeddings: emb, EmbedMask: mask})
}

// MakeCaches implements generate.Model.
func (a *AdapterModel) MakeCaches() []kv.Cache { return a.m.MakeCaches() }

// VocabSize implements generate.Model.
func (a *AdapterModel) VocabSize() int { return a.vocab }

// Variant is the model a lone sequence with adapter set runs (the serial
// lane's Generate): every pass applies set.
func (a *AdapterModel) Variant(set []string) generate.Model {
	return generate.Wrap(a.m.With(lora.Selection{Set: set}), a.vocab)
}

// Lora is the wrapped model.
func (a *AdapterModel) Lora() *lora.Model { return a.m }

// adapterMedia is a multimodal model served with adapters whose text
// model is a view of the adapters' model (its Base is a lora.Model on the
// same Host): the MediaModel as it is, plus the per-row passes of the
// adapters' model, so the batched lane runs adapter rows, media rows and
// media rows with adapters in one batch (the towers unadapted, the text
// model with each row's set).
type adapterMedia struct {
	MediaModel
	rows *AdapterModel
}

// ForwardRows implements generate.RowForwarder.
func (m *adapterMedia) ForwardRows(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan) (*tensor.Array, error) {
	return m.rows.ForwardRows(ids, caches, rows)
}

// LogitsRows implements generate.RowForwarder.
func (m *adapterMedia) LogitsRows(hidden *tensor.Array, rows []generate.RowSpan) (*tensor.Array, error) {
	return m.rows.LogitsRows(hidden, rows)
}

// ForwardOutputs implements generate.OutputForwarder: the media model's
// text passes.
func (m *adapterMedia) ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	return generate.ForwardOutputs(m.MediaModel, ids, caches, pos)
}

// ForwardRowsEmbeds implements generate.RowEmbedForwarder.
func (m *adapterMedia) ForwardRowsEmbeds(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan, emb, mask *tensor.Array) (*tensor.Array, error) {
	return m.rows.ForwardRowsEmbeds(ids, caches, rows, emb, mask)
}

// adapterLaneModel is the model a server with adapters lm runs, given
// Config.Model m: m when it already runs per-row sets; for a multimodal
// m whose Base is a view of lm, m with lm's per-row passes (adapterMedia);
// any other multimodal m as it is (its text model is not the adapters'
// model, so no request may name adapters on its batched lane); else
// (nil, or a plain view of lm) NewAdapterModel(lm).
func adapterLaneModel(m generate.Model, lm *lora.Model) generate.Model {
	if _, rows := m.(generate.RowForwarder); rows {
		return m
	}
	if mm, ok := m.(MediaModel); ok {
		if v, ok := mm.Base().(*lora.Model); ok && v.Host() == lm.Host() {
			return &adapterMedia{MediaModel: mm, rows: NewAdapterModel(lm)}
		}
		return m
	}
	if _, media := m.(interface{ Media() *model.Gemma4Media }); media {
		return m
	}
	return NewAdapterModel(lm)
}

// mediaRowsAdapted reports whether the batched lane runs media rows with
// adapter sets (its model takes embeddings per row).
func (s *Server) mediaRowsAdapted() bool {
	_, ok := s.cfg.Model.(generate.RowEmbedForwarder)
	return ok
}

// adapterHost is the server's side of a lora.Host: which mounted adapters
// requests may still choose, how many queued or running jobs hold each,
// and the adapters the server loaded itself (POST /v1/adapters), freed
// once unmounted. An adapter DELETEd while jobs hold it stops being
// chosen at once and is unmounted when the last of them ends.
type adapterHost struct {
	m  *lora.Model
	am *AdapterModel
	// perRow is set when jobs can run adapters: the serial lane, or a
	// batched lane over a RowForwarder.
	perRow bool

	mu       sync.Mutex
	uses     map[string]int           // jobs holding each id
	leaving  map[string]bool          // deleted, unmounted when its uses reach 0
	owned    map[string]*lora.Adapter // loaded by POST (freed after unmount)
	defaults []string                 // the set of a request that names none
}

func newAdapterHost(m *lora.Model) *adapterHost {
	return &adapterHost{m: m, am: NewAdapterModel(m), uses: map[string]int{}, leaving: map[string]bool{}, owned: map[string]*lora.Adapter{},
		defaults: slices.Clone(m.Selection().Set)}
}

// errNoAdapter is the 400 for an adapter set naming an id requests cannot
// choose.
func errNoAdapter(id string, mounted []string) *apiError {
	list := "none is mounted"
	if len(mounted) > 0 {
		list = "mounted: " + strings.Join(mounted, ", ")
	}
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "adapter", code: "adapter_not_found",
		message: fmt.Sprintf("no adapter %q is mounted (%s; \"none\" is the base model)", id, list)}
}

// choosable lists the ids requests may choose (h.mu held).
func (h *adapterHost) choosable() []string {
	return slices.DeleteFunc(h.m.Host().IDs(), func(id string) bool { return h.leaving[id] })
}

// parseAdapter reads a request's adapter member: nil or "" is the
// server's default set, "none" the base model, "a" or "a+b" mounted
// adapters (residuals added in that order). An id requests cannot choose
// is a 400, never a fallback to the base model.
func (s *Server) parseAdapter(spec *string) ([]string, error) {
	h := s.eng.adapters
	if spec == nil || *spec == "" {
		if h == nil {
			return nil, nil
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(h.defaults), nil
	}
	set := lora.ParseSet(strings.TrimSpace(*spec))
	if len(set) == 0 {
		return nil, nil
	}
	if h == nil {
		return nil, errNoAdapter(set[0], nil)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := h.choosable()
	for _, id := range set {
		if id == "" {
			return nil, badRequest("adapter", "adapter %q has an empty id (want \"id\", \"a+b\" or \"none\")", *spec)
		}
		if !slices.Contains(ok, id) {
			return nil, errNoAdapter(id, ok)
		}
	}
	return set, nil
}

// acquire takes a hold on the adapters of j's set for the job's life
// (released when its last event is pushed) and sets its cache namespace;
// an adapter unmounted since the request was read is a 400.
func (h *adapterHost) acquire(j *job) error {
	set := j.opts.Adapters
	if h == nil || len(set) == 0 {
		if len(set) > 0 {
			return errNoAdapter(set[0], nil)
		}
		return nil
	}
	if !h.perRow {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "adapter", code: "adapter_unsupported",
			message: "this server's model cannot apply adapters per request on its batched lane (it runs no per-row adapter sets)"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := h.choosable()
	for _, id := range set {
		if !slices.Contains(ok, id) {
			return errNoAdapter(id, ok)
		}
	}
	key, err := h.m.Host().Key(set)
	if err != nil {
		return errNoAdapter(set[0], ok)
	}
	for _, id := range set {
		h.uses[id]++
	}
	j.opts.CacheNamespace = key
	set = slices.Clone(set)
	var once sync.Once
	j.out.onDone = func() { once.Do(func() { h.release(set) }) }
	return nil
}

// release drops a job's hold and unmounts the deleted adapters nobody
// holds any more.
func (h *adapterHost) release(set []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range set {
		if h.uses[id]--; h.uses[id] <= 0 {
			delete(h.uses, id)
			if h.leaving[id] {
				h.unmount(id)
			}
		}
	}
}

// unmount removes id from the host now (h.mu held).
func (h *adapterHost) unmount(id string) {
	delete(h.leaving, id)
	h.m.Host().Unmount(id)
	if a := h.owned[id]; a != nil {
		a.Free()
		delete(h.owned, id)
	}
}

// adapterInfo is one entry of GET /v1/adapters (and of /v1/models'
// adapters). Path is the adapter's folder name, never where the server
// keeps it.
type adapterInfo struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"` // "adapter"
	Path          string  `json:"path"`
	Format        string  `json:"format"`
	Rank          int     `json:"rank"`
	Scale         float64 `json:"scale"`
	SizeBytes     int64   `json:"size_bytes"`
	MountedLayers int     `json:"mounted_layers"`
	// InUse counts the queued and running requests that hold it;
	// Unmounting is set once it was deleted while some did.
	InUse      int  `json:"in_use"`
	Unmounting bool `json:"unmounting,omitempty"`
	Default    bool `json:"default,omitempty"`
}

// list describes the mounted adapters in mount order.
func (h *adapterHost) list() []adapterInfo {
	out := []adapterInfo{}
	if h == nil {
		return out
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range h.m.Host().IDs() {
		mt, ok := h.m.Host().Mounted(id)
		if !ok {
			continue
		}
		a := mt.Adapter
		out = append(out, adapterInfo{ID: id, Object: "adapter", Path: filepath.Base(filepath.Clean(a.Dir)), Format: a.Format, Rank: a.Rank, Scale: a.Scale,
			SizeBytes: a.SizeBytes, MountedLayers: mt.Layers(), InUse: h.uses[id], Unmounting: h.leaving[id], Default: slices.Contains(h.defaults, id)})
	}
	return out
}

// errNoHost answers the adapter routes of a server whose model was not
// loaded through package lora.
var errNoHost = &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
	message: "this server's model takes no LoRA adapters (it was not loaded with an adapter host)"}

// handleAdapters is GET /v1/adapters (the mounted adapters) and POST
// /v1/adapters {id, path} (mount one: all or nothing).
func (s *Server) handleAdapters(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case "GET", "HEAD":
		writeJSON(w, http.StatusOK, s.eng.adapters.list())
	case "POST":
		info, err := s.mountAdapter(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, info)
	default:
		w.Header().Set("Allow", "GET, POST")
		s.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s not allowed on %s (use GET or POST)", r.Method, r.URL.Path), typ: "invalid_request_error", code: "method_not_allowed"})
	}
}

// mountRequest is POST /v1/adapters' body.
type mountRequest struct {
	// ID names the adapter in requests (default: the folder's name).
	ID string `json:"id"`
	// Path is the adapter's folder on the server (PEFT or mlx-lm format).
	Path string `json:"path"`
}

// mountAdapter reads the adapter a POST names, checks it against the
// model and mounts it; any failure mounts nothing (400, the message
// naming the folder by its name only).
func (s *Server) mountAdapter(r *http.Request) (*adapterInfo, error) {
	h := s.eng.adapters
	if h == nil {
		return nil, errNoHost
	}
	var req mountRequest
	if err := readJSON(r, &req); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Path) == "" {
		return nil, badRequest("path", "path is required: the adapter's folder on the server")
	}
	dir := filepath.Clean(req.Path)
	name := filepath.Base(dir)
	id := req.ID
	if id == "" {
		id = name
	}
	if id == "none" || strings.ContainsAny(id, "+/ \t\n") {
		return nil, badRequest("id", "adapter id %q: want a name other than \"none\", without '+', '/' or blanks", id)
	}
	bad := func(err error) error {
		msg := strings.ReplaceAll(err.Error(), dir, name)
		if abs, aerr := filepath.Abs(dir); aerr == nil {
			msg = strings.ReplaceAll(msg, abs, name)
		}
		msg = strings.ReplaceAll(msg, req.Path, name)
		code := "invalid_adapter"
		if errors.Is(err, model.ErrUnsupported) {
			code = "unsupported_adapter"
		}
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "path", code: code, message: scrubPaths(msg)}
	}
	h.mu.Lock()
	_, taken := h.m.Host().Mounted(id)
	h.mu.Unlock()
	if taken {
		return nil, &apiError{status: http.StatusConflict, typ: "invalid_request_error", param: "id", code: "adapter_exists",
			message: fmt.Sprintf("an adapter is already mounted as %q (DELETE /v1/adapters/%s first, or give another id)", id, id)}
	}
	a, err := lora.Load(dir, h.m.Backend())
	if err != nil {
		return nil, bad(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.m.Host().Mount(id, a); err != nil {
		a.Free()
		if _, dup := h.m.Host().Mounted(id); dup {
			return nil, &apiError{status: http.StatusConflict, typ: "invalid_request_error", param: "id", code: "adapter_exists", message: fmt.Sprintf("an adapter is already mounted as %q", id)}
		}
		return nil, bad(err)
	}
	h.owned[id] = a
	mt, _ := h.m.Host().Mounted(id)
	s.log.Info("adapter mounted", "adapter", lora.Describe(mt))
	return &adapterInfo{ID: id, Object: "adapter", Path: name, Format: a.Format, Rank: a.Rank, Scale: a.Scale, SizeBytes: a.SizeBytes, MountedLayers: mt.Layers()}, nil
}

// adapterDeleted is DELETE /v1/adapters/{id}'s body.
type adapterDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "adapter"
	Deleted bool   `json:"deleted"`
	// InUse is how many queued or running requests still hold it: it is
	// unmounted when the last of them ends (new requests cannot choose it
	// from now on).
	InUse int `json:"in_use"`
}

// handleAdapter is DELETE /v1/adapters/{id}: 404 when no adapter is
// mounted as id.
func (s *Server) handleAdapter(w http.ResponseWriter, r *http.Request) {
	if r.Method != "DELETE" {
		w.Header().Set("Allow", "DELETE")
		s.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s not allowed on %s (use DELETE)", r.Method, r.URL.Path), typ: "invalid_request_error", code: "method_not_allowed"})
		return
	}
	h := s.eng.adapters
	if h == nil {
		s.fail(w, r, errNoHost)
		return
	}
	id := r.PathValue("id")
	h.mu.Lock()
	_, ok := h.m.Host().Mounted(id)
	if !ok || h.leaving[id] {
		h.mu.Unlock()
		s.fail(w, r, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "id", code: "adapter_not_found", message: fmt.Sprintf("no adapter is mounted as %q", id)})
		return
	}
	inUse := h.uses[id]
	h.defaults = slices.DeleteFunc(h.defaults, func(d string) bool { return d == id })
	if inUse > 0 {
		h.leaving[id] = true
	} else {
		h.unmount(id)
	}
	h.mu.Unlock()
	s.log.Info("adapter deleted", "id", id, "in_use", inUse)
	writeJSON(w, http.StatusOK, adapterDeleted{ID: id, Object: "adapter", Deleted: true, InUse: inUse})
}

// mediaBase is the model a media job's passes run through on the serial
// way (the serial lane; bidirectional images on either lane): the media
// model's Base, or, for a job with adapters, the view of the adapters'
// model applying the job's set — the towers run unadapted and their
// embeddings merge into the text model, which the adapters adapt. A
// media model that is not a view of the adapters' model takes no
// adapters (400).
func (s *Server) mediaBase(mm MediaModel, set []string) (model.Model, error) {
	base := mm.Base()
	if len(set) == 0 {
		return base, nil
	}
	lm, ok := base.(*lora.Model)
	if h := s.eng.adapters; !ok || h == nil || lm.Host() != h.m.Host() {
		return nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "adapter", code: "adapter_unsupported",
			message: "LoRA adapters do not combine with image or audio input on this server (its multimodal model is not the model the adapters are mounted on)"}
	}
	return lm.With(lora.Selection{Set: set}), nil
}

// modelAdapters is /v1/models' adapters member (nil without a host).
func (s *Server) modelAdapters() []adapterInfo {
	if s.eng.adapters == nil {
		return nil
	}
	return s.eng.adapters.list()
}

// closeOwned unmounts and frees the adapters the server mounted (POST)
// once its engine has stopped; those mounted by the caller stay.
func (h *adapterHost) closeOwned() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.owned {
		h.unmount(id)
	}
}
