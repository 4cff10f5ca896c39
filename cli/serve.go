package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/serve"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve a model over OpenAI- and Anthropic-compatible HTTP (the default verb)",
		run:     runServe,
	})
	defaultVerb = "serve" // `mlxgo` with no verb serves
}

// serveFlags are the serve verb's flags, named like mlx_lm.server's.
type serveFlags struct {
	model, host, chatTemplate, templateArgs, logLevel, backend, toolFormat string
	port, maxTokens, topK, queueSize, chunk                                int
	temp, topP, minP                                                       float64
	cacheBytes                                                             int64
	copyWeights                                                            bool
	experts                                                                expertFlags
	memoryBudget                                                           string
	apiKey, apiKeyEnv                                                      string
	servedNames, allowedOrigins, allowedHosts                              listFlag
	anyModelName                                                           bool
	headerTimeout, bodyTimeout, writeTimeout, idleTimeout                  time.Duration
	maxConns, maxHeaderBytes                                               int
	maxBodyBytes                                                           int64
	batch, blockSize                                                       int
	tokenBudget                                                            int
	prefillAlone                                                           int
	kvBudget                                                               int64
	kvQuant                                                                string
	kvStart                                                                int
	shutdownTimeout                                                        time.Duration
	ssdDir                                                                 string
	ssdMax                                                                 int64
	ssdMinTokens                                                           int
	ssdVerify                                                              bool
	responseTTL                                                            time.Duration
	responseBytes                                                          int64
	embedPooling                                                           string
	matryoshkaMin                                                          int
	adapters                                                               []string
	spec                                                                   specFlags
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Type names the flag's value in help text.
func (l *listFlag) Type() string { return "strings" }

// Set adds the comma-separated values of one occurrence.
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// runServe loads the model and serves it until interrupted.
func runServe(args []string, _ io.Reader, _, stderr io.Writer) error {
	var f serveFlags
	fl := newFlags("serve", stderr)
	fl.StringVar(&f.model, "model", "", "model folder or cached repo id (default: the embedded demo model)")
	fl.StringVar(&f.host, "host", "127.0.0.1", "address to listen on")
	fl.IntVar(&f.port, "port", 8080, "port to listen on (0: any free port)")
	fl.IntVar(&f.maxTokens, "max-tokens", serve.DefaultMaxTokens, "tokens to generate when a request gives no max_tokens")
	fl.Float64Var(&f.temp, "temp", 0, "default sampling temperature")
	fl.Float64Var(&f.topP, "top-p", 1, "default nucleus sampling threshold")
	fl.IntVar(&f.topK, "top-k", 0, "default top-k (0: off)")
	fl.Float64Var(&f.minP, "min-p", 0, "default min-p (0: off)")
	fl.StringVar(&f.chatTemplate, "chat-template", "", "chat template: its text, a file holding it, or the name of one of the tokenizer's templates")
	fl.StringVar(&f.templateArgs, "chat-template-args", "", `JSON object of chat template variables, e.g. '{"enable_thinking":false}'`)
	fl.StringVar(&f.logLevel, "log-level", "INFO", "log level: DEBUG, INFO, WARNING, ERROR")
	fl.Int64Var(&f.cacheBytes, "prompt-cache-bytes", serve.DefaultPromptCacheBytes, "prompt cache size in bytes (0: off)")
	fl.StringVar(&f.backend, "backend", "auto", "compute backend: cpu, mlx, or auto")
	int8Flag(fl)
	fl.IntVar(&f.queueSize, "queue-size", serve.DefaultQueueSize, "requests that may wait for the model; more get 429")
	fl.IntVar(&f.batch, "batch", serve.DefaultBatch, "requests that decode together (continuous batching over a paged KV pool); 1: one at a time")
	fl.IntVar(&f.batch, "decode-concurrency", serve.DefaultBatch, "the same as --batch")
	fl.Int64Var(&f.kvBudget, "kv-budget", 0, "bytes of KV the batched lane may hold, prompt cache included (0: half the memory available at start)")
	fl.IntVar(&f.blockSize, "kv-block-size", kv.DefaultBlockSize, "tokens per KV block of the batched lane's pool")
	fl.IntVar(&f.prefillAlone, "prefill-alone", 0, fmt.Sprintf("from this many decoding rows, a joining prompt's last chunk runs in a pass of its own, its first token sooner (0: %d on the CPU backend, never on MLX; -1: never)", serve.DefaultPrefillAlone))
	fl.IntVar(&f.tokenBudget, "token-budget", 0, fmt.Sprintf("tokens one forward pass of the batched lane may take: every decoding row's next token, then chunks of joining prompts (0: %d, or --prefill-step-size when smaller; never below --batch)", serve.DefaultTokenBudget))
	addKVQuantFlag(fl, &f.kvQuant)
	fl.IntVar(&f.kvStart, "quantized-kv-start", generate.DefaultQuantizedKVStart, "context length from which --kv-quant applies on the serial lane (--batch 1); the batched lane's pool stores codes from the first token")
	fl.StringVar(&f.ssdDir, "ssd-cache", "", "folder keeping the KV of long prefixes across requests and restarts: each long prompt, and each prefix the KV pool evicts (batched lane)")
	fl.Int64Var(&f.ssdMax, "ssd-cache-max", serve.DefaultSSDCacheMaxBytes, "bytes the SSD cache may hold (least recently used files go first)")
	fl.IntVar(&f.ssdMinTokens, "ssd-cache-min-tokens", serve.DefaultSSDCacheMinTokens, "shortest prefix (tokens) the SSD cache keeps")
	fl.BoolVar(&f.ssdVerify, "ssd-cache-verify", false, "checksum every SSD cache file at start (otherwise each is checked when used)")
	fl.DurationVar(&f.responseTTL, "response-store-ttl", serve.DefaultResponseStoreTTL, "how long a stored /v1/responses response stays available to GET and previous_response_id")
	fl.Int64Var(&f.responseBytes, "response-store-bytes", serve.DefaultResponseStoreBytes, "bytes of stored /v1/responses responses (oldest evicted first; 0: store none)")
	fl.StringVar(&f.embedPooling, "embedding-pooling", "auto", "how /v1/embeddings pools hidden states: mean, last, or auto (the model's sentence-transformers pooling, else mean)")
	fl.IntVar(&f.matryoshkaMin, "matryoshka-min-dims", 0, "let /v1/embeddings requests shorten vectors to as few as this many dimensions (for Matryoshka-trained models; 0: full width only)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", serve.DefaultShutdownTimeout, "on SIGTERM/SIGINT, how long running requests may go on before they are ended")
	fl.IntVar(&f.chunk, "prefill-step-size", generate.DefaultPrefillChunkSize, "prompt tokens per forward pass during prefill")
	fl.StringVar(&f.toolFormat, "tool-format", "", "tool-call syntax: hermes, gemma4 or llama3 (default: detected)")
	fl.BoolVar(&f.copyWeights, "copy-weights", false, "copy weights into memory instead of mapping the files")
	mediaFetch := addMediaFetchFlags(fl)
	addExpertFlags(fl, &f.experts)
	fl.StringArrayVar(&f.adapters, "adapter", nil, serveAdapterUsage)
	fl.StringArrayVar(&f.adapters, "adapter-path", nil, "the same as --adapter")
	fl.StringVar(&f.memoryBudget, "memory-budget", "", "memory the server plans to (8GiB): refuse to start when the model cannot fit, cap the context at the largest that fits, size the KV pool with what is left (default: MemAvailable, advisory)")
	fl.StringVar(&f.apiKey, "api-key", "", "require this API key on every route but /health (Authorization: Bearer KEY or x-api-key: KEY)")
	fl.StringVar(&f.apiKeyEnv, "api-key-env", "MLXGO_API_KEY", "environment variable holding the API key when --api-key is not given")
	fl.Var(&f.servedNames, "served-model-name", "a model name the server answers to besides the model folder's (repeatable); the first is the id it reports")
	fl.BoolVar(&f.anyModelName, "any-model-name", false, "accept whatever model name a request gives")
	fl.Var(&f.allowedOrigins, "allowed-origins", "browser origins allowed to call the server cross-origin, e.g. http://localhost:3000, or * (repeatable; default none)")
	fl.Var(&f.allowedHosts, "allowed-hosts", "Host header values the server answers (repeatable; default: localhost and the loopback addresses on a loopback bind, any otherwise)")
	fl.DurationVar(&f.headerTimeout, "read-header-timeout", serve.DefaultReadHeaderTimeout, "time a client has to send a request's headers")
	fl.DurationVar(&f.bodyTimeout, "body-timeout", serve.DefaultBodyTimeout, "time a client has to send a request's body")
	fl.DurationVar(&f.writeTimeout, "write-timeout", serve.DefaultWriteTimeout, "time one write of a response may take (a client that stops reading is cut off)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "time a kept-alive connection may idle between requests")
	fl.IntVar(&f.maxConns, "max-connections", serve.DefaultMaxConns, "connections served at once (more wait to be accepted)")
	fl.IntVar(&f.maxHeaderBytes, "max-header-bytes", serve.DefaultMaxHeaderBytes, "largest request header block")
	fl.Int64Var(&f.maxBodyBytes, "max-body-bytes", serve.DefaultMaxBodyBytes, "largest request body (larger ones get 413)")
	addSpecFlags(fl, &f.spec)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo serve [--model DIR] [flags]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	}
	if f.port < 0 || f.port > 65535 {
		return fmt.Errorf("%w: --port %d", errUsage, f.port)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--read-header-timeout", f.headerTimeout}, {"--body-timeout", f.bodyTimeout}, {"--write-timeout", f.writeTimeout}, {"--idle-timeout", f.idleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %v", errUsage, d.name, d.v)
		}
	}
	if f.maxConns <= 0 || f.maxHeaderBytes <= 0 || f.maxBodyBytes <= 0 {
		return fmt.Errorf("%w: --max-connections, --max-header-bytes and --max-body-bytes must be positive", errUsage)
	}
	if p := f.embedPooling; p != "auto" && p != serve.PoolMean && p != serve.PoolLast {
		return fmt.Errorf("%w: --embedding-pooling %q (want mean, last or auto)", errUsage, p)
	}
	if f.responseTTL <= 0 || f.responseBytes < 0 || f.matryoshkaMin < 0 {
		return fmt.Errorf("%w: --response-store-ttl must be positive, --response-store-bytes and --matryoshka-min-dims ≥ 0", errUsage)
	}
	if f.batch < 1 || f.blockSize < 1 || f.kvBudget < 0 || f.tokenBudget < 0 || f.shutdownTimeout <= 0 {
		return fmt.Errorf("%w: --batch and --kv-block-size must be ≥ 1, --kv-budget and --token-budget ≥ 0 and --shutdown-timeout positive", errUsage)
	}
	turbo, qerr := parseKVQuantFlag(f.kvQuant, 0, "")
	if qerr != nil {
		return qerr
	}
	if f.spec.on() {
		if err := f.spec.check(); err != nil {
			return err
		}
	}
	if f.apiKey == "" && f.apiKeyEnv != "" {
		f.apiKey = os.Getenv(f.apiKeyEnv)
	}
	var level slog.Level
	switch strings.ToUpper(f.logLevel) {
	case "DEBUG":
		level = slog.LevelDebug
	case "INFO":
		level = slog.LevelInfo
	case "WARNING", "WARN":
		level = slog.LevelWarn
	case "ERROR", "CRITICAL":
		level = slog.LevelError
	default:
		return fmt.Errorf("%w: --log-level %q", errUsage, f.logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var kwargs map[string]any
	if f.templateArgs != "" {
		if err := json.Unmarshal([]byte(f.templateArgs), &kwargs); err != nil {
			return fmt.Errorf("%w: --chat-template-args: %v", errUsage, err)
		}
	}

	dir, err := resolveModel(f.model)
	if err != nil {
		return err
	}
	id := servedModelID(f.model, dir)
	var aliases []string
	if len(f.servedNames) > 0 {
		// The first served name is the reported id; the folder's name
		// stays accepted.
		aliases = append([]string{id}, f.servedNames[1:]...)
		id = f.servedNames[0]
	}
	var keys []string
	if f.apiKey != "" {
		keys = []string{f.apiKey}
	}
	hosts := []string(f.allowedHosts)
	if len(hosts) == 0 && isLoopback(f.host) {
		hosts = serve.LoopbackHosts
	}

	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("serve needs a tokenizer: %w", err)
	}
	tmpl, err := serveTemplate(tok, f.chatTemplate)
	if err != nil {
		return err
	}
	plan, es, ctxLen, kvBudget, err := servePlan(dir, &f.experts, f.memoryBudget, f.batch, contextLength(dir), f.kvBudget, stderr)
	if err != nil {
		return err
	}
	lm, be, err := loadServeModel(dir, f.backend, f.copyWeights, f.adapters, es, stderr)
	if err != nil {
		return err
	}
	defer lm.Close()
	// the server picks each request's adapters; the model applies none by
	// itself
	var m model.Model = lm.With(lora.Selection{})
	if err := checkKVQuant(m, turbo); err != nil {
		return err
	}
	info := m.Info()
	gen, err := serve.LoadGenerationConfig(dir)
	if err != nil {
		return err
	}
	fp := ""
	if f.ssdDir != "" {
		if fp, err = modelFingerprint(dir); err != nil {
			return fmt.Errorf("fingerprinting the model for --ssd-cache: %w", err)
		}
	}
	pooling := f.embedPooling
	if pooling == "auto" {
		if pooling, err = serve.LoadEmbeddingPooling(dir); err != nil {
			log.Warn("embeddings fall back to mean pooling", "err", err)
			pooling = ""
		}
	}
	responseBytes := int(f.responseBytes)
	if responseBytes == 0 {
		responseBytes = -1
	}
	flagDefaults := serve.SamplingDefaults{Temperature: &f.temp, TopP: &f.topP, TopK: &f.topK, MinP: &f.minP}
	cacheBytes := int(f.cacheBytes)
	if cacheBytes == 0 {
		cacheBytes = -1
	}
	served, closeMedia, err := serveModel(dir, m, be, log)
	if err != nil {
		return err
	}
	defer closeMedia()
	sp, closeDraft, err := f.spec.build(m, dir, tok, be, f.copyWeights, stderr)
	if err != nil {
		return err
	}
	defer closeDraft()
	srv, err := serve.New(serve.Config{
		Model: served, ModelID: id, Tokenizer: tok, Template: tmpl, TemplateKwargs: kwargs,
		EOS: toInt32s(eosIDs(info.EOS, tok)), ContextLength: ctxLen, MaxTokens: f.maxTokens,
		Sampling: gen.Over(flagDefaults), Backend: be, PrefillChunkSize: f.chunk,
		PromptCacheBytes: cacheBytes, SnapshotPrompt: info.SlidingWindow > 0, QueueSize: f.queueSize,
		ToolFormat: f.toolFormat, Logger: log, Aliases: aliases, AnyModelName: f.anyModelName, APIKeys: keys,
		AllowedOrigins: f.allowedOrigins, AllowedHosts: hosts, BodyTimeout: f.bodyTimeout, WriteTimeout: f.writeTimeout,
		MaxBodyBytes: f.maxBodyBytes, Batch: f.batch, KVBudgetBytes: int(kvBudget), BlockSize: f.blockSize, TokenBudget: f.tokenBudget, PrefillAlone: f.prefillAlone,
		KVQuant: turbo, QuantizedKVStart: f.kvStart,
		ShutdownTimeout: f.shutdownTimeout, SSDCacheDir: f.ssdDir, SSDCacheMaxBytes: f.ssdMax, SSDCacheMinTokens: f.ssdMinTokens,
		SSDCacheVerify: f.ssdVerify, ModelFingerprint: fp,
		Plan: plan, ExpertStats: func() (model.ExpertStats, bool) { return expertStats(m) },
		ResponseStoreTTL: f.responseTTL, ResponseStoreBytes: responseBytes, EmbeddingPooling: pooling, MatryoshkaMinDims: f.matryoshkaMin,
		Adapters: lm, Speculation: sp,
		MediaFetch: mediaFetch.policy(),
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, fmt.Sprint(f.port)))
	if err != nil {
		return err
	}
	ln = serve.LimitListener(ln, f.maxConns)
	hs := srv.HTTPServer(serve.HTTPLimits{ReadHeaderTimeout: f.headerTimeout, IdleTimeout: f.idleTimeout, MaxHeaderBytes: f.maxHeaderBytes, MaxConns: f.maxConns})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "mlxgo serve: %s on http://%s (backend %s)\n", id, ln.Addr(), be.Name())
	if len(keys) == 0 && !isLoopback(f.host) {
		log.Warn("serving on a non-loopback address without --api-key: anyone who can reach it can use it")
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Stop accepting; the engine answers queued requests 503, lets running
	// ones finish within --shutdown-timeout and then ends them (each
	// stream gets its closing events), so the handlers return and
	// Shutdown completes.
	log.Info("shutting down", "timeout", f.shutdownTimeout)
	go srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout+5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// servedModelID is the id a served model reports: the repo id of a model
// in the Hugging Face cache (models--org--name/snapshots/…), else the
// model folder's name; never a path.
func servedModelID(arg, dir string) string {
	if arg == "" {
		return demo.Name
	}
	parts := strings.Split(filepath.ToSlash(filepath.Clean(dir)), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(parts[i], "models--"); ok && rest != "" {
			return strings.Replace(rest, "--", "/", 1)
		}
	}
	if base := filepath.Base(filepath.Clean(dir)); base != "." && base != string(filepath.Separator) {
		return base
	}
	return "default_model"
}

// isLoopback reports whether a listen host is a loopback address or name.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// serveTemplate picks the chat template: --chat-template as a file, a
// named template of the tokenizer, or template text; else the default.
func serveTemplate(tok *tokenizer.Tokenizer, arg string) (*tokenizer.ChatTemplate, error) {
	if arg == "" {
		t, err := tok.ChatTemplate("")
		if err != nil {
			return nil, nil // no template: the server lays messages out plainly
		}
		return t, nil
	}
	if _, ok := tok.Config.ChatTemplates[arg]; ok {
		return tok.ChatTemplate(arg)
	}
	src := arg
	if b, err := os.ReadFile(arg); err == nil {
		src = string(b)
	}
	t, err := tokenizer.CompileChatTemplate(src, tok.Config.SpecialTokens, tok.Config.AdditionalSpecialTokens)
	if err != nil {
		return nil, fmt.Errorf("%w: --chat-template: %v", errUsage, err)
	}
	return t, nil
}

// contextLength reads the model's context size from config.json
// (max_position_embeddings, also under text_config); 0 when absent.
func contextLength(dir string) int {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0
	}
	var c struct {
		Max  int `json:"max_position_embeddings"`
		Text *struct {
			Max int `json:"max_position_embeddings"`
		} `json:"text_config"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return 0
	}
	if c.Max == 0 && c.Text != nil {
		return c.Text.Max
	}
	return c.Max
}
