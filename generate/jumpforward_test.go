package generate_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// codec adapts the tokenizer to generate.Codec (the test's own copy of
// what the CLI does; generate itself imports no tokenizer).
type codec struct{ t *tokenizer.Tokenizer }

func (c codec) Encode(s string) []int32 {
	ids := c.t.Encode(s, false)
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}

func (c codec) Decode(ids []int32) string {
	in := make([]int, len(ids))
	for i, v := range ids {
		in[i] = int(v)
	}
	return c.t.Decode(in, false)
}

// Schemas whose keys and punctuation are long forced stretches, with a few
// real choices (enums, a bounded integer, a boolean, a short string).
var jumpSchemas = []string{
	`{"type":"object","properties":{"captain_of_the_ship":{"enum":["ahab","starbuck","stubb"]},"number_of_harpoons":{"type":"integer","minimum":0,"maximum":99},"the_whale_is_white":{"type":"boolean"}},"required":["captain_of_the_ship","number_of_harpoons","the_whale_is_white"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name_of_the_narrator":{"type":"string","maxLength":12},"the_ship":{"const":"Pequod"},"voyage":{"type":"object","properties":{"departure_port":{"enum":["Nantucket","New Bedford"]},"years_at_sea":{"type":"integer","minimum":1,"maximum":5}},"required":["departure_port","years_at_sea"],"additionalProperties":false}},"required":["name_of_the_narrator","the_ship","voyage"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"object","properties":{"whale":{"enum":["sperm","right"]},"seen_from_the_masthead":{"type":"boolean"}},"required":["whale","seen_from_the_masthead"],"additionalProperties":false},"minItems":2,"maxItems":3}`,
}

// replay is a grammar that, at the positions a jump-forward run fed
// forced tokens, allows exactly those tokens, and elsewhere defers to the
// matcher: step-by-step decoding of the same token stream.
type replay struct {
	*grammar.Matcher
	ids    []int32
	forced []bool
	n      int
}

func (r *replay) FillNextTokenBitmask(mask []int32) error {
	if r.n < len(r.ids) && r.forced[r.n] {
		clear(mask)
		id := r.ids[r.n]
		mask[id/32] |= int32(uint32(1) << (id % 32))
		return nil
	}
	return r.Matcher.FillNextTokenBitmask(mask)
}

func (r *replay) AcceptToken(id int) bool {
	r.n++
	return r.Matcher.AcceptToken(id)
}

// run generates to the end, returning the tokens with their forced marks.
func runForced(t *testing.T, m generate.Model, prompt []int32, o *generate.Options) ([]int32, []bool, generate.Stats) {
	t.Helper()
	s, err := generate.Generate(t.Context(), m, prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []int32
	var forced []bool
	for tk, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		if tk.Index != len(ids) {
			t.Fatalf("index %d, want %d", tk.Index, len(ids))
		}
		ids = append(ids, tk.ID)
		forced = append(forced, tk.Forced)
	}
	return ids, forced, s.Stats()
}

// TestJumpForwardDemo runs greedy constrained decoding on the demo model
// (a real byte-fallback BPE tokenizer) with jump-forward, and step by step
// with the forced tokens fed one per forward pass: the tokens (so the
// text) must be the same — the multi-token forward leaves the model in the
// same state as single steps — valid JSON, made with fewer forward passes,
// with no arrays leaked. Free-running step-by-step decoding is compared
// too and logged: a model may spell a forced stretch with other tokens
// than the tokenizer's (this demo model, never trained on JSON, spells
// keys letter by letter), which changes what it conditions on afterwards.
func TestJumpForwardDemo(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	dir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, dir, nil)
	eos := []int32{}
	var stop []int
	for _, id := range tok.Config.EOSTokenIDs {
		eos = append(eos, int32(id))
		stop = append(stop, id)
	}
	v := grammar.NewTokenizerVocab(tok, grammar.DetectVocabKind(tok), m.VocabSize(), stop)
	ti, err := grammar.NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	comp := grammar.NewCompiler(ti, grammar.CompileOptions{}, 0)
	c := codec{tok}
	prompt := func(s string) []int32 { return c.Encode("<bos>" + s) }
	var fwStep, fwJump, fwFree, same, runs int
	for i, schema := range jumpSchemas {
		cg, err := comp.JSONSchema(schema, grammar.JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"Call me Ishmael. ", "The whale"} {
			cm := &countingModel{Model: m}
			o := &generate.Options{MaxTokens: 200, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, Codec: c}
			ids1, forced, st1 := runForced(t, cm, prompt(p), o)
			fw1 := cm.forwards
			cm = &countingModel{Model: m}
			o = &generate.Options{MaxTokens: 200, EOS: eos, Grammar: &replay{Matcher: grammar.NewMatcher(cg), ids: ids1, forced: forced}}
			ids0, _, st0 := runForced(t, cm, prompt(p), o)
			fw0 := cm.forwards
			cm = &countingModel{Model: m}
			ids2, _, _ := runForced(t, cm, prompt(p), &generate.Options{MaxTokens: 200, EOS: eos, Grammar: grammar.NewMatcher(cg)})
			fwFree += cm.forwards
			text1, text0, text2 := c.Decode(ids1), c.Decode(ids0), c.Decode(ids2)
			if !equal32(ids0, ids1) || text0 != text1 {
				t.Errorf("schema %d %q: jump-forward\n%s\n%v\nstep by step\n%s\n%v", i, p, text1, ids1, text0, ids0)
			}
			if st0.StopReason != generate.StopEOS || st1.StopReason != generate.StopEOS {
				t.Errorf("schema %d: stop reasons %q (steps) and %q (jump), want eos", i, st0.StopReason, st1.StopReason)
			}
			var x any
			if err := json.Unmarshal([]byte(text1), &x); err != nil {
				t.Errorf("schema %d: %q is not JSON: %v", i, text1, err)
			}
			nf := 0
			for _, f := range forced {
				if f {
					nf++
				}
			}
			// Every decode step samples one token (the last one EOS, not
			// yielded); forced tokens ride along.
			if st1.ForcedTokens == 0 || nf < st1.ForcedTokens || fw1 >= fw0 ||
				st1.DecodeSteps+st1.ForcedTokens != len(ids1)+1 || st0.DecodeSteps != len(ids0)+1 {
				t.Errorf("schema %d: forward passes %d → %d, %d forced marks, stats %+v / %+v", i, fw0, fw1, nf, st0, st1)
			}
			fwStep += fw0
			fwJump += fw1
			runs++
			if text2 == text1 {
				same++
			}
			t.Logf("schema %d %q: %d tokens, %d forced; forward passes %d step by step, %d with jump-forward; free-running step by step gives the same text: %v\n%s",
				i, p, len(ids1), st1.ForcedTokens, fw0, fw1, text2 == text1, text1)
		}
	}
	t.Logf("forward passes (prefill included): %d step by step on the same tokens, %d free-running step by step, %d with jump-forward; free-running text equal in %d of %d runs", fwStep, fwFree, fwJump, same, runs)
}

// TestJumpForwardCanonical checks the boundary handling on a stretch the
// grammar forces after a choice: the forced tokens equal the tokenizer's
// encoding of the sampled token's text plus the forced text (less the
// last token), and a cap on tokens is honoured mid-jump.
func TestJumpForwardCanonical(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	dir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, dir, nil)
	v := grammar.NewTokenizerVocab(tok, grammar.DetectVocabKind(tok), m.VocabSize(), tok.Config.EOSTokenIDs)
	ti, err := grammar.NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	// After the free first letter, the rest is forced.
	g, err := grammar.RegexGrammar(`(a|b) whale of a tale, told by the captain of the ship`)
	if err != nil {
		t.Fatal(err)
	}
	cg := grammar.CompileGrammar(g, ti, grammar.CompileOptions{})
	c := codec{tok}
	var eos []int32
	for _, id := range tok.Config.EOSTokenIDs {
		eos = append(eos, int32(id))
	}
	pr := c.Encode("<bos>Call me Ishmael.")
	out, st, err := collect(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, Codec: c})
	if err != nil {
		t.Fatal(err)
	}
	text := c.Decode(out)
	if !strings.HasSuffix(text, " whale of a tale, told by the captain of the ship") || st.StopReason != generate.StopEOS {
		t.Fatalf("text %q, stop %q", text, st.StopReason)
	}
	whole := c.Encode(text)
	if n := len(whole) - 1; len(out) < n || !equal32(out[:n], whole[:n]) {
		t.Errorf("tokens %v, the tokenizer's %v", out, whole)
	}
	if st.DecodeSteps != 3 { // first letter, the token left to sampling, EOS
		t.Errorf("%d decode steps for %d tokens, want 3", st.DecodeSteps, len(out))
	}
	// A cap inside the forced stretch ends the generation there.
	out, st, err = collect(t, m, pr, &generate.Options{MaxTokens: 4, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, Codec: c})
	if err != nil || len(out) != 4 || st.StopReason != generate.StopLength || st.DecodeSteps != 1 {
		t.Errorf("capped: %v %+v %v", out, st, err)
	}
	// Text forced before anything is sampled rides along with the last
	// prompt token — unless a cache snapshot is due right after it.
	g2, err := grammar.RegexGrammar(`Call me captain of the ship (Ahab|Ishmael)\.`)
	if err != nil {
		t.Fatal(err)
	}
	cg2 := grammar.CompileGrammar(g2, ti, grammar.CompileOptions{})
	ids, forced, st := runForced(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg2), JumpForward: true, Codec: c})
	if txt := c.Decode(ids); !strings.HasPrefix(txt, "Call me captain of the ship ") || len(forced) < 3 || !forced[0] || !forced[1] || st.DecodeSteps > 4 ||
		st.PrefillMs <= 0 || st.DecodeMs <= 0 || st.DecodeMs > 60e3 || !(st.DecodeTPS > 0) {
		t.Errorf("leading: %q %v %+v", txt, forced, st)
	}
	snapped := -1
	ids, forced, _ = runForced(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg2), JumpForward: true, Codec: c,
		OnPrefillDone: func(cs []kv.Cache, n int) {
			for _, kc := range cs {
				if kc != nil {
					snapped = kc.Offset()
				}
			}
		}})
	if snapped != len(pr) || forced[0] || !strings.HasPrefix(c.Decode(ids), "Call me captain of the ship ") {
		t.Errorf("with a snapshot due: caches held %d tokens (want %d), forced %v", snapped, len(pr), forced)
	}
	// Logprobs turn jump-forward off.
	s, err := generate.Generate(t.Context(), m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, Codec: c,
		Sampler: sampler.Params{Logprobs: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for tk, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(float64(tk.Logprob)) {
			t.Errorf("token %d without a logprob", tk.Index)
		}
	}
	if st := s.Stats(); st.ForcedTokens != 0 {
		t.Errorf("jump-forward ran with logprobs: %+v", st)
	}
}

func equal32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
