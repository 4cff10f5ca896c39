package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
	"github.com/spf13/pflag"
)

// specFlags are the speculative decoding flags of generate, chat, bench
// and serve.
type specFlags struct {
	draftModel   string
	draft        string
	numDraft     string
	promptLookup int
	ngramMin     int
	ngramMax     int
	accept       string
}

// addSpecFlags registers the speculative decoding flags.
func addSpecFlags(fl *pflag.FlagSet, f *specFlags) {
	fl.StringVar(&f.draftModel, "draft-model", "", "speculative decoding: a draft model with the target's tokenizer (folder, cached repo, demo / demo-q4)")
	fl.StringVar(&f.draft, "draft", "", "speculative decoding's draft source: model (with --draft-model), assistant (--draft-model is a Gemma 4 assistant drafter for a Gemma 4 target; detected from its config too), mtp (the target's own multi-token-prediction head) or ngram (prompt lookup)")
	fl.StringVar(&f.numDraft, "num-draft-tokens", "", fmt.Sprintf("tokens drafted per speculative round, or auto (chosen each round from the measured acceptance and costs, up to %d); default %d for a draft model, %d for prompt lookup", generate.DefaultAutoMaxDraft, generate.DefaultNumDraft, generate.DefaultLookupDraft))
	fl.IntVar(&f.promptLookup, "prompt-lookup", 0, "prompt lookup decoding with n-grams of up to N tokens (--draft ngram --ngram-max N)")
	fl.IntVar(&f.ngramMin, "ngram-min", generate.DefaultNgramMin, "prompt lookup: the shortest n-gram matched")
	fl.IntVar(&f.ngramMax, "ngram-max", generate.DefaultNgramMax, "prompt lookup: the longest n-gram matched")
	fl.StringVar(&f.accept, "spec-accept", "sample", "acceptance at temperature > 0: sample (speculative sampling, the target's distribution) or exact (the target's own draw must match)")
}

// on reports whether the flags ask for speculative decoding.
func (f *specFlags) on() bool {
	return f.draftModel != "" || f.draft != "" || f.promptLookup > 0
}

// check validates the flags' combination.
func (f *specFlags) check() error {
	switch {
	case f.draft != "" && f.draft != "ngram" && f.draft != "model" && f.draft != "assistant" && f.draft != "mtp":
		return fmt.Errorf("%w: --draft must be ngram, model, assistant or mtp, not %q", errUsage, f.draft)
	case f.draft == "mtp" && (f.draftModel != "" || f.promptLookup > 0):
		return fmt.Errorf("%w: --draft mtp drafts with the target's own MTP head: no --draft-model or --prompt-lookup", errUsage)
	case (f.draft == "model" || f.draft == "assistant") && f.draftModel == "":
		return fmt.Errorf("%w: --draft %s needs --draft-model", errUsage, f.draft)
	case f.draftModel != "" && (f.draft == "ngram" || f.promptLookup > 0):
		return fmt.Errorf("%w: a draft model and prompt lookup (--draft ngram, --prompt-lookup) exclude each other", errUsage)
	case f.promptLookup < 0:
		return fmt.Errorf("%w: --prompt-lookup must be ≥ 0", errUsage)
	case f.accept != "sample" && f.accept != "exact":
		return fmt.Errorf("%w: --spec-accept must be sample or exact, not %q", errUsage, f.accept)
	}
	if _, _, err := f.gamma(); err != nil {
		return err
	}
	lo, hi := f.ngramMin, f.ngramMax
	if f.promptLookup > 0 {
		hi = f.promptLookup
		lo = min(lo, hi)
	}
	if lo < 1 || hi < lo {
		return fmt.Errorf("%w: prompt lookup n-gram sizes %d..%d (need 1 ≤ --ngram-min ≤ --ngram-max)", errUsage, lo, hi)
	}
	return nil
}

// gamma parses --num-draft-tokens: a count (0 or empty: the default), or
// auto (optionally auto:MAX).
func (f *specFlags) gamma() (n int, auto bool, err error) {
	v := strings.TrimSpace(f.numDraft)
	if v == "" {
		return 0, false, nil
	}
	if rest, ok := strings.CutPrefix(v, "auto"); ok {
		if rest == "" {
			return 0, true, nil
		}
		if m, ok := strings.CutPrefix(rest, ":"); ok {
			if n, err := strconv.Atoi(m); err == nil && n > 0 {
				return n, true, nil
			}
		}
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%w: --num-draft-tokens must be a count ≥ 0, auto or auto:MAX, not %q", errUsage, f.numDraft)
	}
	return n, false, nil
}

// specProbe is text both tokenizers of a speculative pair must encode
// alike.
const specProbe = "Speculative decoding: 12,345 tokens — \"draft\" & verify!\n\tdone."

// build makes the generation's Speculation (nil when off): it loads the
// draft model on be (refusing one whose vocabulary or tokenizer differs
// from the target's, naming the difference). close frees the draft model.
func (f *specFlags) build(target model.Model, targetDir string, tok *tokenizer.Tokenizer, be tensor.Backend, copyWeights bool, stderr io.Writer) (sp *generate.Speculation, closeFn func(), err error) {
	closeFn = func() {}
	if !f.on() {
		return nil, closeFn, nil
	}
	if err := f.check(); err != nil {
		return nil, closeFn, err
	}
	n, auto, _ := f.gamma()
	sp = &generate.Speculation{NumDraft: n, Auto: auto, Exact: f.accept == "exact"}
	if f.draft == "mtp" {
		p, ok := mtpOf(target)
		if !ok {
			return nil, closeFn, fmt.Errorf("%w: --draft mtp: the %s checkpoint carries no MTP head this architecture runs", errUsage, target.Info().ModelType)
		}
		sp.Drafter = func(info generate.DraftInfo) (generate.Drafter, error) { return generate.NewMTPDrafter(p, info) }
		return sp, closeFn, nil
	}
	if f.draftModel == "" {
		sp.Lookup = true
		sp.NgramMin, sp.NgramMax = f.ngramMin, f.ngramMax
		if f.promptLookup > 0 {
			sp.NgramMax = f.promptLookup
			sp.NgramMin = min(f.ngramMin, f.promptLookup)
		}
		return sp, closeFn, nil
	}
	dir, err := resolveModel(f.draftModel)
	if err != nil {
		return nil, closeFn, fmt.Errorf("--draft-model: %w", err)
	}
	if same, _ := sameDir(dir, targetDir); same {
		fmt.Fprintln(stderr, "mlxgo: the draft model is the target model itself: every draft is accepted, nothing is saved")
	}
	dm, err := model.Load(dir, &model.LoadOptions{Backend: be, Copy: copyWeights})
	if err != nil {
		return nil, closeFn, fmt.Errorf("--draft-model: %w", err)
	}
	if a, ok := assistantOf(dm); ok || f.draft == "assistant" {
		if !ok {
			dm.Close()
			return nil, closeFn, fmt.Errorf("%w: --draft assistant: %s is a %s checkpoint, not a Gemma 4 assistant", errUsage, dir, dm.Info().ModelType)
		}
		t, ok := gemma4Of(target)
		if !ok {
			dm.Close()
			return nil, closeFn, fmt.Errorf("%w: the Gemma 4 assistant drafts for a Gemma 4 target, not %s", errUsage, target.Info().ModelType)
		}
		if _, err := generate.NewAssistantDrafter(a, t, generate.DraftInfo{Vocab: target.Info().Vocab, Backend: be}); err != nil {
			dm.Close()
			return nil, closeFn, fmt.Errorf("%w: --draft-model: %v", errUsage, err)
		}
		sp.Drafter = func(info generate.DraftInfo) (generate.Drafter, error) {
			return generate.NewAssistantDrafter(a, t, info)
		}
		return sp, func() { dm.Close() }, nil
	}
	if tok == nil {
		if _, err := os.Stat(filepath.Join(targetDir, "tokenizer.json")); err == nil {
			if tok, err = tokenizer.Load(targetDir); err != nil {
				dm.Close()
				return nil, closeFn, err
			}
		}
	}
	if err := checkDraftPair(target.Info().Vocab, dm.Info().Vocab, tok, dir); err != nil {
		dm.Close()
		return nil, closeFn, err
	}
	prepackInt8(dm, be, stderr)
	sp.Draft = generate.Wrap(dm, dm.Info().Vocab)
	return sp, func() { dm.Close() }, nil
}

// assistantOf returns m's Gemma 4 assistant architecture, if it is one.
func assistantOf(m model.Model) (*model.Gemma4Assistant, bool) {
	l, ok := m.(interface{ Arch() model.Architecture })
	if !ok {
		return nil, false
	}
	a, ok := l.Arch().(*model.Gemma4Assistant)
	return a, ok
}

// mtpOf returns m's MTP head, if its checkpoint carries one.
func mtpOf(m model.Model) (*model.MTP, bool) {
	if b, ok := m.(interface{ Base() model.Model }); ok {
		m = b.Base()
	}
	l, ok := m.(*model.Loaded)
	if !ok {
		return nil, false
	}
	return l.MTP()
}

// gemma4Of returns m's Gemma 4 text architecture, if it is one (under a
// LoRA view too: the assistant reads the target's state whatever the
// adapters).
func gemma4Of(m model.Model) (*model.Gemma4, bool) {
	if b, ok := m.(interface{ Base() model.Model }); ok {
		m = b.Base()
	}
	l, ok := m.(interface{ Arch() model.Architecture })
	if !ok {
		return nil, false
	}
	g, ok := l.Arch().(*model.Gemma4)
	return g, ok
}

// checkDraftPair refuses a draft model whose vocabulary size or
// tokenizer differs from the target's (tok: the target's, nil when it
// has none; draftDir: the draft model's folder).
func checkDraftPair(targetVocab, draftVocab int, tok *tokenizer.Tokenizer, draftDir string) error {
	if targetVocab != draftVocab {
		return fmt.Errorf("%w: the draft model's vocabulary has %d tokens, the target's %d: speculative decoding needs one tokenizer", errUsage, draftVocab, targetVocab)
	}
	_, err := os.Stat(filepath.Join(draftDir, "tokenizer.json"))
	hasDraft := err == nil
	switch {
	case tok == nil && !hasDraft:
		return nil
	case tok == nil || !hasDraft:
		return fmt.Errorf("%w: only one of the target and the draft model has a tokenizer.json; cannot check that they share one", errUsage)
	}
	dt, err := tokenizer.Load(draftDir)
	if err != nil {
		return fmt.Errorf("--draft-model tokenizer: %w", err)
	}
	a, b := tok.Encode(specProbe, true), dt.Encode(specProbe, true)
	if !slices.Equal(a, b) {
		return fmt.Errorf("%w: the draft model's tokenizer differs from the target's: %q encodes as %s vs the target's %s", errUsage, specProbe, short(b), short(a))
	}
	if x, y := dt.Config.SpecialTokens["eos_token"], tok.Config.SpecialTokens["eos_token"]; x != y {
		return fmt.Errorf("%w: the draft model's EOS token %q differs from the target's %q", errUsage, x, y)
	}
	return nil
}

// short prints the first ids of a list.
func short(ids []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i == 8 {
			b.WriteString(" …")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteByte(']')
	return b.String()
}

// sameDir reports whether two folders are the same one.
func sameDir(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// printSpecStats writes a summary line of speculative decoding's statistics.
func printSpecStats(w io.Writer, st generate.Stats) {
	sp := st.Speculation
	if sp == nil {
		return
	}
	fmt.Fprintf(w, "Speculation: %d drafted, %d accepted (%.1f%%), %d target forwards, %.2f tokens per forward, accepted by position %v of %v\n",
		sp.Drafted, sp.Accepted, 100*sp.AcceptanceRate, sp.TargetCalls, sp.TokensPerForward, sp.AcceptedByPos, sp.DraftedByPos)
}
