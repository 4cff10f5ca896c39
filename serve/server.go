package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// Defaults of Config's zero fields.
const (
	DefaultQueueSize        = 64
	DefaultMaxTokens        = 512 // mlx_lm.server's --max-tokens
	DefaultMaxBodyBytes     = 32 << 20
	DefaultPromptCacheBytes = 2 << 30
)

// SamplingDefaults fill sampling fields a request leaves out. A nil field
// has no default at this level (the next level, or the field's zero value,
// applies).
type SamplingDefaults struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
}

// Over returns d with its nil fields taken from fallback: d wins.
func (d SamplingDefaults) Over(fallback SamplingDefaults) SamplingDefaults {
	if d.Temperature == nil {
		d.Temperature = fallback.Temperature
	}
	if d.TopP == nil {
		d.TopP = fallback.TopP
	}
	if d.TopK == nil {
		d.TopK = fallback.TopK
	}
	if d.MinP == nil {
		d.MinP = fallback.MinP
	}
	if d.RepetitionPenalty == nil {
		d.RepetitionPenalty = fallback.RepetitionPenalty
	}
	return d
}

// LoadGenerationConfig reads the sampling defaults of a model folder's
// generation_config.json (a missing file gives no defaults). HF's
// do_sample=false means greedy decoding whatever temperature says.
func LoadGenerationConfig(dir string) (SamplingDefaults, error) {
	var d SamplingDefaults
	raw, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	var g struct {
		DoSample          *bool    `json:"do_sample"`
		Temperature       *float64 `json:"temperature"`
		TopP              *float64 `json:"top_p"`
		TopK              *int     `json:"top_k"`
		MinP              *float64 `json:"min_p"`
		RepetitionPenalty *float64 `json:"repetition_penalty"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return d, fmt.Errorf("generation_config.json: %w", err)
	}
	d = SamplingDefaults{Temperature: g.Temperature, TopP: g.TopP, TopK: g.TopK, MinP: g.MinP, RepetitionPenalty: g.RepetitionPenalty}
	if g.DoSample != nil && !*g.DoSample {
		zero := 0.0
		d.Temperature = &zero
	}
	return d, nil
}

// Config describes the one model a Server serves and how.
type Config struct {
	// Model runs the forward passes; only the engine goroutine calls it.
	// It may be nil when Adapters is set.
	Model generate.Model
	// Adapters, when set, is the model loaded through package lora
	// (lora.Open): its Host's adapters are what requests choose with
	// their adapter member ("id", "a+b", "none"), and GET, POST and
	// DELETE /v1/adapters list, mount and unmount them. Its selection
	// (the adapters lora.Open mounted) is the set of requests that name
	// none. Model, when nil or a plain generate.Model (a view of the same
	// loaded model), becomes NewAdapterModel(Adapters). A MediaModel
	// whose Base is a view of Adapters (lora.Model.With) takes adapters on
	// every request on both lanes, image and audio ones included: the
	// towers run unadapted, the text model with the request's set (on the
	// batched lane as rows beside others, each with its own set). Any
	// other multimodal Model is kept: its text model is not the one the
	// adapters are mounted on, so image and audio requests naming
	// adapters are a 400 (adapter_unsupported), and so is every adapter
	// request on its batched lane (text ones run on the serial lane).
	Adapters *lora.Model
	// ModelID is the name /v1/models reports; requests may name it, one
	// of Aliases, or leave model empty. Any other name is a 404.
	ModelID string
	Aliases []string
	// Tokenizer encodes prompts and decodes output (required).
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat messages (nil: a plain "role: content" layout).
	Template *tokenizer.ChatTemplate
	// TemplateKwargs are chat-template variables every request gets
	// (a request's chat_template_kwargs override them).
	TemplateKwargs map[string]any
	// EOS ends generation.
	EOS []int32
	// ContextLength bounds prompt + max_tokens (0: unchecked).
	ContextLength int
	// MaxTokens is the generation limit when a request gives none
	// (0: DefaultMaxTokens).
	MaxTokens int
	// Sampling are the defaults for omitted sampling fields, already
	// layered (generation_config.json over the server's flags).
	Sampling SamplingDefaults
	// Backend and Memory are passed to generate.Options.
	Backend tensor.Backend
	Memory  generate.MemoryInfo
	// PrefillChunkSize is generate.Options.PrefillChunkSize.
	PrefillChunkSize int
	// TokenBudget caps the tokens of one forward pass of the batched lane
	// (generate.BatchOptions.TokenBudget): every decoding row's token,
	// then prefill chunks of joining prompts, first come first served
	// (0: DefaultTokenBudget, or PrefillChunkSize when that is smaller).
	TokenBudget int
	// PrefillRows caps the joining prompts one pass of the batched lane
	// prefills (generate.BatchOptions.PrefillRows; 0: as many as the
	// budget holds).
	PrefillRows int
	// FillPrefill is generate.BatchOptions.FillPrefill.
	FillPrefill bool
	// PrefillAlone is generate.BatchOptions.PrefillAlone: a joining
	// prompt that ends in a pass gets that pass alone once this many rows
	// decode (0: DefaultPrefillAlone on the CPU backend, never on others;
	// negative: never, every decoding row in every pass).
	PrefillAlone int
	// PromptCacheBytes caps the prompt cache (0: DefaultPromptCacheBytes;
	// negative: no prompt cache).
	PromptCacheBytes int
	// SnapshotPrompt stores a snapshot of the caches at the end of each
	// prompt besides the one after generation: needed for models with
	// sliding-window (untrimmable) caches, so that the next turn can reuse
	// the prompt's KV.
	SnapshotPrompt bool
	// QueueSize bounds the requests waiting for the engine (0:
	// DefaultQueueSize); a full queue answers 429.
	QueueSize int
	// Batch is how many requests decode together (0: DefaultBatch): above
	// 1, requests join a running generate.Batch at its next step and keep
	// their KV in a paged pool that is also the prompt cache (prefix blocks
	// shared between requests, one ceiling: KVBudgetBytes; PromptCacheBytes
	// and SnapshotPrompt then do not apply). 1 runs requests one at a time
	// (the serial lane, with its own prompt cache).
	Batch int
	// KVBudgetBytes caps the batched lane's KV pool (0: half the memory
	// the system reports available at start, 2 GiB where it reports none).
	// A request waits while its prompt + max_tokens do not fit beside the
	// running rows, and is refused (400 context_over_budget) when they
	// could never fit.
	KVBudgetBytes int
	// BlockSize is the pool's tokens per KV block (0: kv.DefaultBlockSize).
	BlockSize int
	// KVQuant, when set, stores KV as TurboQuant codes: the batched
	// lane's pool blocks from the first token (KVBudgetBytes then holds
	// 2.56× the tokens at head dim 128 with k8v3), the serial lane's
	// caches from QuantizedKVStart on (generate.Options.KVQuant).
	KVQuant          *kv.TurboSpec
	QuantizedKVStart int
	// SSDCacheDir, when set, keeps the KV of long prompt prefixes (at least
	// SSDCacheMinTokens, default DefaultSSDCacheMinTokens) in files in
	// this folder, written off the token loop and restored into a request
	// sharing the prefix, also after a restart; at most SSDCacheMaxBytes
	// (default DefaultSSDCacheMaxBytes; least recently used files go
	// first). SSDCacheVerify checksums every file at start (otherwise a
	// file is checked when it is used). Needs the batched lane.
	SSDCacheDir       string
	SSDCacheMaxBytes  int64
	SSDCacheMinTokens int
	SSDCacheVerify    bool
	// ModelFingerprint identifies the model's weights and tokenizer (the
	// SSD cache's files carry it; "" falls back to ModelID and the
	// vocabulary size).
	ModelFingerprint string
	// Plan, when set, is the memory plan the server started under
	// (model.PlanMemory): GET /fit returns it and /stats reports its
	// admission numbers.
	Plan *model.Plan
	// ExpertStats, when set, reads the model's expert streaming counters
	// for /stats (experts).
	ExpertStats func() (model.ExpertStats, bool)
	// ShutdownTimeout bounds how long Close lets running rows finish
	// (0: DefaultShutdownTimeout); queued requests get 503 at once.
	ShutdownTimeout time.Duration
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes); larger
	// bodies get 413.
	MaxBodyBytes int64
	// AnyModelName accepts whatever model name a request gives (for
	// tools that hard-code one), as llama-server does.
	AnyModelName bool
	// APIKeys, when any are set, are required on every route but /health,
	// as "Authorization: Bearer KEY" (OpenAI) or "x-api-key: KEY"
	// (Anthropic); a request without one gets 401.
	APIKeys []string
	// AllowedOrigins are the browser origins (scheme://host[:port]) that
	// may call the server cross-origin ("*": any); a request with another
	// Origin header gets 403. None by default.
	AllowedOrigins []string
	// AllowedHosts, when set, are the only Host header values (port
	// aside) the server answers; "*" allows any. Servers bound to
	// loopback should set LoopbackHosts, against DNS rebinding.
	AllowedHosts []string
	// BodyTimeout bounds reading a request body (0: DefaultBodyTimeout);
	// a slower body gets 408 and the connection is closed.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of a response (0:
	// DefaultWriteTimeout): a client that stops reading is cut off.
	WriteTimeout time.Duration
	// ToolFormat forces the tool-call syntax ("hermes", "gemma4",
	// "llama3"); "" detects it from the vocabulary and template.
	ToolFormat string
	// Logger receives request and panic logs (nil: slog.Default()).
	Logger *slog.Logger
	// ResponseStoreTTL is how long a stored Responses API response stays
	// available to GET /v1/responses/{id} and previous_response_id (0:
	// DefaultResponseStoreTTL).
	ResponseStoreTTL time.Duration
	// ResponseStoreBytes caps the stored responses (0:
	// DefaultResponseStoreBytes; negative: none are stored); the oldest
	// are evicted first.
	ResponseStoreBytes int
	// MediaFetch, when set, lets image parts name http(s) URLs, fetched
	// under its policy (timeout, size cap, public addresses only); nil
	// refuses them unfetched.
	MediaFetch *MediaFetch
	// EmbeddingPooling is how POST /v1/embeddings pools the final hidden
	// states: "mean" (the default) or "last" (the last token's).
	EmbeddingPooling string
	// MatryoshkaMinDims, when > 0, lets embedding requests ask for
	// dimensions down to this many (the vector truncated, then
	// renormalized), for models trained for it; 0 allows only the full
	// width.
	MatryoshkaMinDims int
	// Speculation, when set, makes every text generation decode
	// speculatively with it (generate.Speculation: a draft model, prompt
	// lookup, γ, acceptance), on either lane — on the batched one each
	// row drafts and verifies its own tokens in the shared passes; image
	// and audio requests decode plainly. Responses report the statistics
	// in usage.speculation.
	Speculation *generate.Speculation
}

// Server answers OpenAI- and Anthropic-compatible requests with one model.
// It is an http.Handler; Close stops its engine.
type Server struct {
	cfg     Config
	log     *slog.Logger
	eng     *engine
	mux     *http.ServeMux
	created int64
	format  outputFormat
	gramMu  sync.Mutex
	gram    *grammarVocab
	tools   toolCompilers
	metrics metrics
	// fingerprint is system_fingerprint: the model id and backend, hashed.
	fingerprint string
	// responses are the stored Responses API responses.
	responses *responseStore
}

// New starts a server's engine goroutine. The caller keeps ownership of
// the model and tokenizer and must Close the server before freeing them.
func New(cfg Config) (*Server, error) {
	if cfg.Adapters != nil {
		cfg.Model = adapterLaneModel(cfg.Model, cfg.Adapters)
	}
	if cfg.Model == nil || cfg.Tokenizer == nil {
		return nil, errors.New("serve: Config needs a Model and a Tokenizer")
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.SSDCacheDir != "" && cfg.Batch == 1 {
		return nil, errors.New("serve: the SSD cache needs the batched lane (Batch > 1)")
	}
	if cfg.KVBudgetBytes < 0 || cfg.BlockSize < 0 {
		return nil, fmt.Errorf("serve: KV budget %d bytes, block size %d", cfg.KVBudgetBytes, cfg.BlockSize)
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.PromptCacheBytes == 0 {
		cfg.PromptCacheBytes = DefaultPromptCacheBytes
	}
	if cfg.ModelID == "" {
		cfg.ModelID = "default_model"
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.ResponseStoreBytes == 0 {
		cfg.ResponseStoreBytes = DefaultResponseStoreBytes
	}
	if cfg.EmbeddingPooling != "" && cfg.EmbeddingPooling != PoolMean && cfg.EmbeddingPooling != PoolLast {
		return nil, fmt.Errorf("serve: embedding pooling %q (want %s or %s)", cfg.EmbeddingPooling, PoolMean, PoolLast)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, created: time.Now().Unix(), responses: newResponseStore(cfg.ResponseStoreTTL, cfg.ResponseStoreBytes)}
	if s.log == nil {
		s.log = slog.Default()
	}
	src := ""
	if cfg.Template != nil {
		src = cfg.Template.Source()
	}
	s.format = detectFormat(cfg.ToolFormat, cfg.Tokenizer, src)
	be := ""
	if cfg.Backend != nil {
		be = cfg.Backend.Name()
	}
	sum := sha256.Sum256([]byte(cfg.ModelID + "\x00" + be))
	s.fingerprint = "fp_" + hex.EncodeToString(sum[:5])
	eng, err := newEngine(&s.cfg, s.log)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	s.routes()
	return s, nil
}

// Close stops the engine after the request it is running and frees the
// prompt cache; queued requests are answered with an error. Adapters
// mounted through POST /v1/adapters are unmounted and freed.
func (s *Server) Close() {
	s.eng.close()
	s.eng.adapters.closeOwned()
}

// ServeHTTP dispatches a request, recovering from panics so that one bad
// request never takes the server down.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := &trackingWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	rid := r.Header.Get("X-Request-Id")
	if !validRequestID(rid) {
		rid = newCallID("req_")
	}
	w.Header().Set("X-Request-Id", rid)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !rw.wrote {
				writeError(rw, http.StatusInternalServerError, "internal server error", "server_error", "", "")
			}
		}
	}()
	start := time.Now()
	if !s.guard(rw, r) {
		s.metrics.request(r.URL.Path, rw.status, time.Since(start))
		return
	}
	// The body must arrive within BodyTimeout; the deadline is lifted once
	// it has (a deadline left set would cancel a long generation).
	_ = rw.rc.SetReadDeadline(start.Add(s.cfg.BodyTimeout))
	r.Body = &deadlineBody{ReadCloser: http.MaxBytesReader(rw, r.Body, s.cfg.MaxBodyBytes), clear: func() { _ = rw.rc.SetReadDeadline(time.Time{}) }}
	s.mux.ServeHTTP(rw, r)
	s.metrics.request(r.URL.Path, rw.status, time.Since(start))
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rw.status, "ms", time.Since(start).Milliseconds(), "request_id", rid)
}

// validRequestID accepts a client's X-Request-Id when it is short and
// plain, so that it can be echoed and logged safely.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// deadlineBody lifts the body's read deadline once it is read to its end
// (or fails).
type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.clear)
	}
	return n, err
}

// trackingWriter remembers whether the response started (a panic after
// that cannot send an error status) and passes Flush through.
type trackingWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // per write
	wrote   bool
	status  int
}

func (t *trackingWriter) WriteHeader(code int) {
	if !t.wrote {
		t.wrote, t.status = true, code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if !t.wrote {
		t.wrote, t.status = true, http.StatusOK
	}
	_ = t.rc.SetWriteDeadline(time.Now().Add(t.timeout))
	return t.ResponseWriter.Write(b)
}

// Flush sends buffered stream data to the client.
func (t *trackingWriter) Flush() {
	_ = t.rc.SetWriteDeadline(time.Now().Add(t.timeout))
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("/v1/chat/completions", s.only("POST", s.handleChat))
	m.HandleFunc("/chat/completions", s.only("POST", s.handleChat))
	m.HandleFunc("/v1/completions", s.only("POST", s.handleCompletions))
	m.HandleFunc("/completions", s.only("POST", s.handleCompletions))
	m.HandleFunc("/v1/messages", s.only("POST", s.handleMessages))
	m.HandleFunc("/v1/messages/count_tokens", s.only("POST", s.handleCountTokens))
	m.HandleFunc("/v1/responses", s.only("POST", s.handleResponses))
	m.HandleFunc("/v1/responses/{id}", s.handleResponse)
	m.HandleFunc("/v1/embeddings", s.only("POST", s.handleEmbeddings))
	m.HandleFunc("/v1/adapters", s.handleAdapters)
	m.HandleFunc("/v1/adapters/{id}", s.handleAdapter)
	m.HandleFunc("/v1/models", s.only("GET", s.handleModels))
	m.HandleFunc("/v1/models/{id...}", s.only("GET", s.handleModel))
	m.HandleFunc("/health", s.only("GET", s.handleHealth))
	m.HandleFunc("/stats", s.only("GET", s.handleStats))
	m.HandleFunc("/fit", s.only("GET", s.handleFit))
	m.HandleFunc("/admin/cache/flush", s.only("POST", s.handleCacheFlush))
	m.HandleFunc("/metrics", s.only("GET", s.handleMetrics))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, &apiError{status: http.StatusNotFound, message: fmt.Sprintf("unknown route %s %s", r.Method, r.URL.Path), typ: "invalid_request_error", code: "not_found"})
	})
	s.mux = m
}

// only answers 405 (with Allow) to methods other than method; HEAD is
// allowed where GET is.
func (s *Server) only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == "GET" && r.Method == "HEAD") {
			w.Header().Set("Allow", method)
			s.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s not allowed on %s (use %s)", r.Method, r.URL.Path, method), typ: "invalid_request_error", code: "method_not_allowed"})
			return
		}
		h(w, r)
	}
}

// apiError is an error with its HTTP status and OpenAI error fields.
type apiError struct {
	status  int
	message string
	typ     string
	param   string
	code    string
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), typ: "invalid_request_error", param: param}
}

// writeError writes OpenAI's error object.
func writeError(w http.ResponseWriter, status int, msg, typ, param, code string) {
	var body openaiError
	body.Error.Message, body.Error.Type = msg, typ
	if param != "" {
		body.Error.Param = &param
	}
	if code != "" {
		body.Error.Code = &code
	}
	writeJSON(w, status, body)
}

func (s *Server) writeAPIError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, message: err.Error(), typ: "server_error"}
	}
	if ae.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if ae.status == http.StatusRequestTimeout {
		w.Header().Set("Connection", "close")
	}
	msg := ae.message
	if ae.status >= 500 {
		msg = scrubPaths(msg)
	}
	writeError(w, ae.status, msg, ae.typ, ae.param, ae.code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// checkModel accepts the served model's id, an alias, its folder's base
// name, or an empty name.
func (s *Server) checkModel(name string) error {
	if s.cfg.AnyModelName || name == "" || name == s.cfg.ModelID || name == "default_model" || filepath.Base(s.cfg.ModelID) == name {
		return nil
	}
	for _, a := range s.cfg.Aliases {
		if a == name {
			return nil
		}
	}
	return &apiError{status: http.StatusNotFound, message: fmt.Sprintf("the model %q does not exist (this server serves %q)", name, s.cfg.ModelID), typ: "invalid_request_error", param: "model", code: "model_not_found"}
}

// modelNames are the names /v1/models lists: the id, then the aliases.
func (s *Server) modelNames() []string {
	names := []string{s.cfg.ModelID}
	for _, a := range s.cfg.Aliases {
		if a != "" && !slices.Contains(names, a) {
			names = append(names, a)
		}
	}
	return names
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	names := s.modelNames()
	if anthropicClient(r) {
		list := anthropicModelList{Data: []anthropicModel{}, FirstID: names[0], LastID: names[len(names)-1]}
		for _, n := range names {
			list.Data = append(list.Data, s.anthropicModel(n))
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	list := modelList{Object: "list"}
	for _, n := range names {
		list.Data = append(list.Data, modelObject{ID: n, Object: "model", Created: s.created, OwnedBy: "mlxgo", Adapters: s.modelAdapters()})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) anthropicModel(name string) anthropicModel {
	return anthropicModel{Type: "model", ID: name, DisplayName: name, CreatedAt: time.Unix(s.created, 0).UTC().Format(time.RFC3339)}
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.checkModel(id); err != nil || id == "" {
		if err == nil {
			err = &apiError{status: http.StatusNotFound, message: "no model id given", typ: "invalid_request_error", param: "model", code: "model_not_found"}
		}
		s.fail(w, r, err)
		return
	}
	if anthropicClient(r) {
		writeJSON(w, http.StatusOK, s.anthropicModel(id))
		return
	}
	writeJSON(w, http.StatusOK, modelObject{ID: id, Object: "model", Created: s.created, OwnedBy: "mlxgo", Adapters: s.modelAdapters()})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.statsWithPlan())
}

// Stats returns the server's counters (what GET /stats reports).
func (s *Server) Stats() Stats { return s.eng.stats() }
