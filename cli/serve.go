package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mlxgo/mlxgo/generate"
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
	fl.IntVar(&f.queueSize, "queue-size", serve.DefaultQueueSize, "requests that may wait for the model; more get 429")
	fl.IntVar(&f.chunk, "prefill-step-size", generate.DefaultPrefillChunkSize, "prompt tokens per forward pass during prefill")
	fl.StringVar(&f.toolFormat, "tool-format", "", "tool-call syntax: hermes, gemma4 or llama3 (default: detected)")
	fl.BoolVar(&f.copyWeights, "copy-weights", false, "copy weights into memory instead of mapping the files")
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
	id := f.model
	if id == "" {
		id = demo.Name
	}

	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("serve needs a tokenizer: %w", err)
	}
	tmpl, err := serveTemplate(tok, f.chatTemplate)
	if err != nil {
		return err
	}
	m, be, err := loadModel(dir, f.backend, f.copyWeights, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	info := m.Info()
	gen, err := serve.LoadGenerationConfig(dir)
	if err != nil {
		return err
	}
	flagDefaults := serve.SamplingDefaults{Temperature: &f.temp, TopP: &f.topP, TopK: &f.topK, MinP: &f.minP}
	cacheBytes := int(f.cacheBytes)
	if cacheBytes == 0 {
		cacheBytes = -1
	}
	srv, err := serve.New(serve.Config{
		Model: generate.Wrap(m, info.Vocab), ModelID: id, Tokenizer: tok, Template: tmpl, TemplateKwargs: kwargs,
		EOS: toInt32s(eosIDs(info.EOS, tok)), ContextLength: contextLength(dir), MaxTokens: f.maxTokens,
		Sampling: gen.Over(flagDefaults), Backend: be, PrefillChunkSize: f.chunk,
		PromptCacheBytes: cacheBytes, SnapshotPrompt: info.SlidingWindow > 0, QueueSize: f.queueSize,
		ToolFormat: f.toolFormat, Logger: log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, fmt.Sprint(f.port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "mlxgo serve: %s on http://%s (backend %s)\n", id, ln.Addr(), be.Name())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
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
