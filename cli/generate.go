package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "generate",
		summary: "greedy-decode a continuation of a prompt",
		run:     runGenerate,
	})
}

// runGenerate loads a model and decodes greedily through its caches. It is
// the hook parity checks use (ids in, ids out); the sampler and generate
// packages grow it into the full loop.
func runGenerate(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fl := newFlags("generate", stderr)
	dir := fl.String("model", "", "model folder (config.json + safetensors) (required)")
	promptIDs := fl.String("prompt-ids", "", "comma-separated prompt token ids")
	prompt := fl.String("prompt", "", "prompt text (needs tokenizer.json in the model folder)")
	maxTokens := fl.Int("max-tokens", 64, "tokens to generate at most")
	temp := fl.Float64("temp", 0, "sampling temperature (only 0, greedy, for now)")
	chunk := fl.Int("prefill-chunk", 512, "prompt tokens per forward pass during prefill")
	ignoreEOS := fl.Bool("ignore-eos", false, "keep going past end-of-sequence tokens")
	copyWeights := fl.Bool("copy-weights", false, "copy weights into memory instead of mapping the files")
	asJSON := fl.Bool("json", false, `print {"ids": [...], "text": "..."}`)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT) [--max-tokens N] [--temp 0] [--json]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return fmt.Errorf("%w: --model is required", errUsage)
	case (*promptIDs == "") == (*prompt == ""):
		return fmt.Errorf("%w: give exactly one of --prompt-ids and --prompt", errUsage)
	case *temp != 0:
		return fmt.Errorf("%w: --temp %v: only greedy decoding (--temp 0) is implemented", errUsage, *temp)
	case *maxTokens < 0 || *chunk <= 0:
		return fmt.Errorf("%w: --max-tokens must be ≥ 0 and --prefill-chunk > 0", errUsage)
	}
	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(filepath.Join(*dir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(*dir); err != nil {
			return err
		}
	}
	var ids []int32
	if *promptIDs != "" {
		for _, f := range strings.Split(*promptIDs, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || v < 0 {
				return fmt.Errorf("%w: --prompt-ids: %q is not a token id", errUsage, f)
			}
			ids = append(ids, int32(v))
		}
	} else {
		if tok == nil {
			return fmt.Errorf("--prompt needs %s/tokenizer.json; use --prompt-ids", *dir)
		}
		for _, v := range tok.Encode(*prompt, true) {
			ids = append(ids, int32(v))
		}
	}
	m, err := model.Load(*dir, &model.LoadOptions{Copy: *copyWeights})
	if err != nil {
		return err
	}
	defer m.Close()
	info := m.Info()
	for _, id := range ids {
		if int(id) >= info.Vocab {
			return fmt.Errorf("%w: prompt id %d is outside the vocabulary (%d)", errUsage, id, info.Vocab)
		}
	}
	var stop func(int32) bool
	if !*ignoreEOS && len(info.EOS) > 0 {
		stop = func(id int32) bool { return slices.Contains(info.EOS, int(id)) }
	}
	out := []int32{}
	if *maxTokens > 0 {
		if out, err = model.Greedy(m, ids, *maxTokens, *chunk, stop); err != nil {
			return err
		}
	}
	text := ""
	if tok != nil {
		ints := make([]int, len(out))
		for i, v := range out {
			ints[i] = int(v)
		}
		text = tok.Decode(ints, true)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			IDs  []int32 `json:"ids"`
			Text string  `json:"text"`
		}{out, text})
	}
	if tok != nil {
		_, err = fmt.Fprintln(stdout, text)
		return err
	}
	strs := make([]string, len(out))
	for i, v := range out {
		strs[i] = strconv.Itoa(int(v))
	}
	_, err = fmt.Fprintln(stdout, strings.Join(strs, ","))
	return err
}
