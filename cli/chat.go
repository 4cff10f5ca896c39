package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "chat",
		summary: "chat with a model in the terminal",
		run:     runChat,
	})
}

// chatTurnHook, when set (by tests), sees every finished turn: the prompt
// ids, the generated ids and the generation's statistics.
var chatTurnHook func(prompt, out []int32, st generate.Stats)

// chatFlags are the chat verb's flags.
type chatFlags struct {
	modelArg, system, backend, template string
	kvQuant                             string
	maxTokens, chunk, topK, kvStart     int
	temp, topP, minP, repPenalty        float64
	seed                                uint64
	cacheBytes                          int64
	verbose                             bool
	stops, adapters                     []string
	spec                                specFlags
	media                               []mediaArg
}

const chatHelp = `Commands: /reset forgets the conversation, /exit (or end of input) quits, /help shows this.`

// chatMediaHelp is the usage note on --image and --audio.
const chatMediaHelp = `--image and --audio files go with the first message of the conversation (and again after /reset).`

// runChat is a read-eval-print loop over a chat model. The conversation is
// re-rendered through the chat template every turn (so the template sees
// the whole history, as a server request would), and the KV caches of the
// previous turns are kept in a prompt cache, so each turn prefills only
// the tokens the history does not already share with the last one.
func runChat(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var f chatFlags
	fl := newFlags("chat", stderr)
	fl.StringVar(&f.modelArg, "model", "", "model folder, cached repo name, or demo (default)")
	fl.StringVar(&f.system, "system", "", "system message starting the conversation")
	fl.StringVar(&f.template, "chat-template", "", "named chat template of the tokenizer (default: the default one)")
	fl.IntVar(&f.maxTokens, "max-tokens", 1024, "tokens to generate at most per reply (-1: no limit)")
	fl.IntVar(&f.chunk, "prefill-chunk-size", generate.DefaultPrefillChunkSize, "prompt tokens per forward pass during prefill")
	fl.Float64Var(&f.temp, "temp", 0, "sampling temperature (0: greedy)")
	fl.Float64Var(&f.topP, "top-p", 0, "nucleus sampling threshold (0 or 1: off)")
	fl.IntVar(&f.topK, "top-k", 0, "sample among the k most likely tokens (0: off)")
	fl.Float64Var(&f.minP, "min-p", 0, "drop tokens less likely than min-p × the top one (0: off)")
	fl.Uint64Var(&f.seed, "seed", 0, "random seed (default: drawn from the system)")
	fl.Float64Var(&f.repPenalty, "repetition-penalty", 0, "penalty for tokens of the last 20 (0 or 1: off)")
	fl.StringArrayVar(&f.stops, "stop", nil, "end the reply when this text is generated (repeatable)")
	fl.Int64Var(&f.cacheBytes, "prompt-cache-bytes", 4<<30, "KV memory kept between turns")
	fl.StringVar(&f.backend, "backend", "auto", "compute backend: cpu, mlx, or auto")
	int8Flag(fl)
	fl.StringArrayVar(&f.adapters, "adapter-path", nil, adapterUsage)
	addKVQuantFlag(fl, &f.kvQuant)
	fl.IntVar(&f.kvStart, "quantized-kv-start", generate.DefaultQuantizedKVStart, "context length from which the KV cache is quantized (--kv-quant)")
	addSpecFlags(fl, &f.spec)
	addMediaFlags(fl, &f.media)
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print prompt/generation statistics after each reply (stderr)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo chat [--model] MODEL [flags]\n\n"+chatHelp+"\n"+chatMediaHelp)
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() == 1 && f.modelArg == "":
		f.modelArg = fl.Arg(0)
	case fl.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	case f.modelArg == "":
		fmt.Fprintln(stderr, "mlxgo chat: no model given; using the embedded demo model")
	}
	if f.chunk <= 0 {
		return fmt.Errorf("%w: --prefill-chunk-size must be > 0", errUsage)
	}
	if f.maxTokens == 0 {
		return fmt.Errorf("%w: --max-tokens must not be 0", errUsage)
	}
	dir, err := resolveModel(f.modelArg)
	if err != nil {
		return err
	}
	params := sampler.Params{Temperature: f.temp, TopP: f.topP, TopK: f.topK, MinP: f.minP, RepetitionPenalty: f.repPenalty}
	if fl.Changed("seed") {
		params.Seed = &f.seed
	}

	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("chat needs a tokenizer: %w", err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return err
	}
	ct, err := tok.ChatTemplate(f.template)
	if err != nil {
		return fmt.Errorf("chat needs a chat template: %w", err)
	}
	turbo, err := parseKVQuantFlag(f.kvQuant, 0, "")
	if err != nil {
		return err
	}
	m, be, err := loadModelAdapters(dir, f.backend, false, f.adapters, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkKVQuant(m, turbo); err != nil {
		return err
	}
	info := m.Info()
	if err := params.Validate(info.Vocab); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	sp, closeDraft, err := f.spec.build(m, dir, tok, be, false, stderr)
	if err != nil {
		return err
	}
	defer closeDraft()
	var cm *chatMedia
	if len(f.media) > 0 {
		if sp != nil {
			return fmt.Errorf("%w: --image/--audio do not combine with speculative decoding", errUsage)
		}
		if cm, err = newChatMedia(dir, be, tok, f.media); err != nil {
			return err
		}
		defer cm.free()
	}
	c := &chatSession{
		f: &f, tok: tok, ct: ct, m: generate.Wrap(m, info.Vocab), base: m, media: cm,
		pc:     generate.NewPromptCache(int(min(f.cacheBytes, int64(^uint(0)>>1)))),
		stdout: stdout, stderr: stderr,
		opts: generate.Options{MaxTokens: f.maxTokens, PrefillChunkSize: f.chunk, Sampler: params,
			Backend: be, EOS: toInt32s(eosIDs(info.EOS, tok)), KVQuant: turbo, QuantizedKVStart: f.kvStart,
			Speculation: sp},
	}
	defer c.pc.Clear()
	c.reset()
	return c.loop(stdin)
}

// chatSession is one conversation.
type chatSession struct {
	f              *chatFlags
	tok            *tokenizer.Tokenizer
	ct             *tokenizer.ChatTemplate
	m              generate.Model
	base           model.Model // m unwrapped, for merging media
	media          *chatMedia  // nil: none
	pc             *generate.PromptCache
	opts           generate.Options
	history        []map[string]string
	stdout, stderr io.Writer
}

func (c *chatSession) reset() {
	c.history = c.history[:0]
	if c.f.system != "" {
		c.history = append(c.history, map[string]string{"role": "system", "content": c.f.system})
	}
	c.pc.Clear()
}

// loop reads one message per line until /exit or the end of the input.
func (c *chatSession) loop(stdin io.Reader) error {
	in := bufio.NewReader(stdin)
	fmt.Fprintln(c.stderr, chatHelp)
	for {
		fmt.Fprint(c.stdout, ">>> ")
		line, err := in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		eof := err != nil
		msg := strings.TrimSpace(line)
		switch {
		case msg == "" && eof:
			fmt.Fprintln(c.stdout)
			return nil
		case msg == "":
			continue
		case msg == "/exit" || msg == "/quit" || msg == "/bye":
			return nil
		case msg == "/reset" || msg == "/clear":
			c.reset()
			fmt.Fprintln(c.stdout, "(conversation reset)")
		case msg == "/help" || msg == "/?":
			fmt.Fprintln(c.stdout, chatHelp)
		case strings.HasPrefix(msg, "/") && !strings.Contains(msg, " "):
			fmt.Fprintf(c.stdout, "unknown command %s; %s\n", msg, chatHelp)
		default:
			if err := c.turn(msg); err != nil {
				return err
			}
		}
		if eof {
			return nil
		}
	}
}

// turn answers one user message, streaming the reply to stdout.
func (c *chatSession) turn(msg string) error {
	content := msg
	if c.media != nil && !slices.ContainsFunc(c.history, func(m map[string]string) bool { return m["role"] == "user" }) {
		content = c.media.placeholder + msg
	}
	c.history = append(c.history, map[string]string{"role": "user", "content": content})
	text, err := c.ct.Render(tokenizer.ChatRequest{Messages: c.history, AddGenerationPrompt: true})
	if err != nil {
		c.history = c.history[:len(c.history)-1]
		return fmt.Errorf("chat template: %w", err)
	}
	ids := encodePrompt(c.tok, text, false)
	gm, chunk := c.m, c.opts.PrefillChunkSize
	if c.media != nil {
		fwd, mids, done, err := mergeMedia(c.media.be, c.base, c.media.tokens, c.media.media, ids, false, &chunk)
		if err != nil {
			c.history = c.history[:len(c.history)-1]
			return err
		}
		defer done()
		gm, ids = generate.Wrap(fwd, c.base.Info().Vocab), mids
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	reply, out, st, err := c.generate(ctx, gm, ids, chunk)
	if err != nil && !errors.Is(err, context.Canceled) {
		c.history = c.history[:len(c.history)-1]
		return err
	}
	// An interrupted reply stays in the history as far as it got.
	c.history = append(c.history, map[string]string{"role": "assistant", "content": reply})
	if c.f.verbose {
		printStats(c.stderr, st)
		printSpecStats(c.stderr, st)
	}
	if chatTurnHook != nil {
		chatTurnHook(ids, out, st)
	}
	return nil
}

// generate runs ids through the model, reusing the prompt cache's longest
// matching prefix, and puts the caches back afterwards.
func (c *chatSession) generate(ctx context.Context, gm generate.Model, ids []int32, chunk int) (string, []int32, generate.Stats, error) {
	opts := c.opts
	opts.PrefillChunkSize = chunk
	caches, _ := c.pc.Take(ids)
	opts.Caches = caches
	s, err := generate.Generate(ctx, gm, ids, &opts)
	if err != nil {
		model.FreeCaches(caches)
		return "", nil, generate.Stats{}, err
	}
	detok := c.tok.NewDetokenizer(true)
	stopper := generate.NewStopMatcher(c.f.stops...)
	var reply strings.Builder
	var out []int32
	emit := func(piece string) {
		reply.WriteString(piece)
		fmt.Fprint(c.stdout, piece)
	}
	stopped := false
	var genErr error
	for t, err := range s.Tokens() {
		if err != nil {
			genErr = err
			break
		}
		out = append(out, t.ID)
		piece, hit := stopper.Add(detok.Add(int(t.ID)))
		emit(piece)
		if hit {
			stopped = true
			break
		}
	}
	if !stopped {
		piece, hit := stopper.Add(detok.Flush())
		emit(piece)
		if !hit {
			emit(stopper.Flush())
		}
	}
	fmt.Fprintln(c.stdout)
	st := s.Stats()
	cs := s.TakeCaches()
	s.Close()
	if genErr != nil && !errors.Is(genErr, context.Canceled) {
		model.FreeCaches(cs)
		return reply.String(), out, st, genErr
	}
	c.pc.Put(st.CacheTokens, cs)
	return reply.String(), out, st, genErr
}
