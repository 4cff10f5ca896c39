package generate_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
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

// TestJumpForwardDemo runs greedy constrained decoding on the demo model in float32
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
	_, c, comp, _, eos := demoSetup(t)
	dir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	// float32: a T-token bfloat16 forward rounds differently from T single
	// steps, which flips this (not overconfident) model's near-ties
	fm, err := model.Load(dir, &model.LoadOptions{DType: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	m := generate.Wrap(fm, fm.Info().Vocab)
	prompt := func(s string) []int32 { return c.Encode("<bos>" + s) }
	var fwStep, fwJump, fwFree, same, runs int
	for i, schema := range jumpSchemas {
		cg, err := comp.JSONSchema(schema, grammar.JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"Call me Ishmael. ", "The whale"} {
			cm := &countingModel{Model: m}
			o := &generate.Options{MaxTokens: 200, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c}
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
			if !slices.Equal(ids0, ids1) || text0 != text1 {
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
	m, c, _, ti, eos := demoSetup(t)
	// After the free first letter, the rest is forced.
	g, err := grammar.RegexGrammar(`(a|b) whale of a tale, told by the captain of the ship`)
	if err != nil {
		t.Fatal(err)
	}
	cg := grammar.CompileGrammar(g, ti, grammar.CompileOptions{})
	pr := c.Encode("<bos>Call me Ishmael.")
	out, st, err := collect(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c})
	if err != nil {
		t.Fatal(err)
	}
	text := c.Decode(out)
	if !strings.HasSuffix(text, " whale of a tale, told by the captain of the ship") || st.StopReason != generate.StopEOS {
		t.Fatalf("text %q, stop %q", text, st.StopReason)
	}
	whole := c.Encode(text)
	if n := len(whole) - 1; len(out) < n || !slices.Equal(out[:n], whole[:n]) {
		t.Errorf("tokens %v, the tokenizer's %v", out, whole)
	}
	if st.DecodeSteps != 3 { // first letter, the token left to sampling, EOS
		t.Errorf("%d decode steps for %d tokens, want 3", st.DecodeSteps, len(out))
	}
	// A cap inside the forced stretch ends the generation there.
	out, st, err = collect(t, m, pr, &generate.Options{MaxTokens: 4, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c})
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
	ids, forced, st := runForced(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg2), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c})
	if txt := c.Decode(ids); !strings.HasPrefix(txt, "Call me captain of the ship ") || len(forced) < 3 || !forced[0] || !forced[1] || st.DecodeSteps > 4 ||
		st.PrefillMs <= 0 || st.DecodeMs <= 0 || st.DecodeMs > 60e3 || !(st.DecodeTPS > 0) {
		t.Errorf("leading: %q %v %+v", txt, forced, st)
	}
	snapped := -1
	ids, forced, _ = runForced(t, m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg2), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c,
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
	s, err := generate.Generate(t.Context(), m, pr, &generate.Options{MaxTokens: 100, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: true, JumpMode: generate.JumpCanonical, Codec: c,
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

// demoSetup loads the demo model, its tokenizer as a codec, a grammar
// compiler for its vocabulary and its EOS ids.
func demoSetup(t *testing.T) (generate.Model, codec, *grammar.Compiler, *grammar.TokenizerInfo, []int32) {
	t.Helper()
	dir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, dir, nil)
	var eos []int32
	for _, id := range tok.Config.EOSTokenIDs {
		eos = append(eos, int32(id))
	}
	v := grammar.NewTokenizerVocab(tok, grammar.DetectVocabKind(tok), m.VocabSize(), tok.Config.EOSTokenIDs)
	ti, err := grammar.NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	return m, codec{tok}, grammar.NewCompiler(ti, grammar.CompileOptions{}, 0), ti, eos
}

// runLogprobs generates to the end and returns the tokens, their
// logprobs and forced marks, and the stats.
func runLogprobs(t *testing.T, m generate.Model, prompt []int32, o *generate.Options) ([]int32, []float32, []bool, generate.Stats) {
	t.Helper()
	s, err := generate.Generate(t.Context(), m, prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []int32
	var lps []float32
	var forced []bool
	for tk, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		lps = append(lps, tk.Logprob)
		forced = append(forced, tk.Forced)
	}
	return ids, lps, forced, s.Stats()
}

// stepwise runs every multi-token forward pass as single-token ones, so
// that its numbers are those of step-by-step decoding. On the bf16 demo
// model a T-token forward pass is not bit-identical to T single-token
// ones (other kernels, other rounding), which can flip a near-tie; with
// it, any difference between exact jump-forward and step-by-step decoding
// is the loop's, not the arithmetic's. The loop still makes one Forward
// call per jump, which is what countingModel counts.
type stepwise struct{ generate.Model }

func (w stepwise) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	var hs []*tensor.Array
	defer func() {
		for _, h := range hs {
			h.Free()
		}
	}()
	for t := range ids.Dim(1) {
		one := tensor.SliceAxis(ids, 1, t, t+1)
		h, err := w.Model.Forward(one, caches)
		one.Free()
		if err != nil {
			return nil, err
		}
		tensor.Eval(h)
		hs = append(hs, h)
	}
	return tensor.Concatenate(hs, 1), nil
}

// TestJumpForwardExact checks that exact jump-forward (the default mode)
// gives the tokens and text of free-running step-by-step constrained
// greedy decoding on every schema and prompt of TestJumpForwardDemo (where
// the canonical mode may not), with one forward pass fewer per forced
// token; and that with logprobs, the forced tokens' logprob is the 0
// step-by-step decoding reports for them and the sampled ones' are
// step-by-step's. Both run on stepwise (see there); the plain model's
// results are logged.
func TestJumpForwardExact(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	plain, c, comp, _, eos := demoSetup(t)
	m := stepwise{plain}
	prompt := func(s string) []int32 { return c.Encode("<bos>" + s) }
	var fwFree, fwExact, fwCanon, sameCanon, samePlain, runs int
	for i, schema := range jumpSchemas {
		cg, err := comp.JSONSchema(schema, grammar.JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"Call me Ishmael. ", "The whale"} {
			opts := func(jump bool, mode generate.JumpMode, lp bool) *generate.Options {
				return &generate.Options{MaxTokens: 200, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: jump, JumpMode: mode, Codec: c,
					Sampler: sampler.Params{Logprobs: lp}}
			}
			cm := &countingModel{Model: m}
			free, _, stF := runForced(t, cm, prompt(p), opts(false, 0, false))
			fF := cm.forwards
			cm = &countingModel{Model: m}
			ex, forced, stE := runForced(t, cm, prompt(p), opts(true, generate.JumpExact, false))
			fE := cm.forwards
			cm = &countingModel{Model: m}
			can, _, _ := runForced(t, cm, prompt(p), opts(true, generate.JumpCanonical, false))
			fC := cm.forwards
			nf := 0
			for _, f := range forced {
				if f {
					nf++
				}
			}
			if !slices.Equal(free, ex) || c.Decode(free) != c.Decode(ex) || stF.StopReason != stE.StopReason {
				t.Errorf("schema %d %q: exact jump-forward\n%s\n%v\nstep by step\n%s\n%v", i, p, c.Decode(ex), ex, c.Decode(free), free)
			}
			if stE.ForcedTokens == 0 || nf != stE.ForcedTokens || fE != fF-stE.ForcedTokens ||
				stE.DecodeSteps+stE.ForcedTokens != len(ex)+1 || stF.ForcedTokens != 0 {
				t.Errorf("schema %d %q: forward passes %d → %d, %d forced marks, stats %+v / %+v", i, p, fF, fE, nf, stF, stE)
			}
			// Logprobs keep exact mode on: forced tokens get the 0 that
			// step-by-step decoding gives them, sampled ones its values.
			idsF, lpF, _, _ := runLogprobs(t, m, prompt(p), opts(false, 0, true))
			idsE, lpE, fE2, stE2 := runLogprobs(t, m, prompt(p), opts(true, generate.JumpExact, true))
			if !slices.Equal(idsF, free) || !slices.Equal(idsE, free) || stE2.ForcedTokens != stE.ForcedTokens {
				t.Errorf("schema %d %q: with logprobs the tokens changed (%d forced)", i, p, stE2.ForcedTokens)
			} else {
				for k := range lpE {
					if fE2[k] && (lpE[k] != 0 || lpF[k] != 0) || math.Abs(float64(lpE[k]-lpF[k])) > 1e-5 || math.IsNaN(float64(lpE[k])) {
						t.Errorf("schema %d %q token %d (forced %v): logprob %g, step by step %g", i, p, k, fE2[k], lpE[k], lpF[k])
					}
				}
			}
			// The plain model's multi-token forward rounds differently.
			pf, _, _ := runForced(t, plain, prompt(p), opts(false, 0, false))
			pe, _, _ := runForced(t, plain, prompt(p), opts(true, generate.JumpExact, false))
			if slices.Equal(pf, pe) {
				samePlain++
			}
			fwFree += fF
			fwExact += fE
			fwCanon += fC
			runs++
			if c.Decode(can) == c.Decode(free) {
				sameCanon++
			}
			t.Logf("schema %d %q: %d tokens, %d forced; forward passes (prefill included) %d step by step, %d exact, %d canonical (same text: %v)",
				i, p, len(ex), stE.ForcedTokens, fF, fE, fC, c.Decode(can) == c.Decode(free))
		}
	}
	t.Logf("forward passes over %d runs: %d step by step, %d exact jump-forward, %d canonical (canonical text equal in %d of %d); on the plain bf16 model exact equals step by step in %d of %d",
		runs, fwFree, fwExact, fwCanon, sameCanon, runs, samePlain, runs)
}

// TestJumpForwardExactRegex checks exact jump-forward where the grammar
// forces long single-token runs: the demo vocabulary spells { and } only
// with their byte tokens, so a regex of braces around a choice forces a
// run before anything is sampled (fed with the last prompt token) and one
// after the choice. The tokens equal free-running step-by-step decoding,
// with one forward pass fewer per forced token; a cap inside the leading
// run gives step by step's first tokens; a sampled run matches the regex.
func TestJumpForwardExactRegex(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	plain, c, _, ti, eos := demoSetup(t)
	m := stepwise{plain}
	g, err := grammar.RegexGrammar(`\{\{\{\{\{\{(yes|no)\}\}\}\}\}\}`)
	if err != nil {
		t.Fatal(err)
	}
	cg := grammar.CompileGrammar(g, ti, grammar.CompileOptions{})
	pr := c.Encode("<bos>Call me Ishmael.")
	opts := func(jump bool, max int, temp float64) *generate.Options {
		return &generate.Options{MaxTokens: max, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: jump,
			Sampler: sampler.Params{Temperature: temp, Seed: new(uint64(3))}}
	}
	cm := &countingModel{Model: m}
	free, _, _ := runForced(t, cm, pr, opts(false, 100, 0))
	fF := cm.forwards
	cm = &countingModel{Model: m}
	ex, forced, stE := runForced(t, cm, pr, opts(true, 100, 0))
	fE := cm.forwards
	text := c.Decode(ex)
	if !slices.Equal(free, ex) || stE.StopReason != generate.StopEOS || !strings.HasPrefix(text, "{{{{{{") || !strings.HasSuffix(text, "}}}}}}") {
		t.Fatalf("exact %q %v (%s), step by step %q %v", text, ex, stE.StopReason, c.Decode(free), free)
	}
	// The six leading braces, and the six closing ones (the last of which
	// may be sampled when the choice's last token needs a step first).
	if !slices.Equal(free[:6], []int32{129, 129, 129, 129, 129, 129}) || !forced[0] || !forced[5] || !forced[len(forced)-1] ||
		stE.ForcedTokens < 11 || fE != fF-stE.ForcedTokens {
		t.Errorf("forced %v, %d forced tokens; forward passes %d step by step, %d exact", forced, stE.ForcedTokens, fF, fE)
	}
	t.Logf("%q: %d tokens, %d forced; forward passes (prefill included) %d step by step, %d exact", text, len(ex), stE.ForcedTokens, fF, fE)
	// A cap inside the leading run.
	capF, _, _ := runForced(t, m, pr, opts(false, 4, 0))
	capE, _, st := runForced(t, m, pr, opts(true, 4, 0))
	if !slices.Equal(capF, capE) || len(capE) != 4 || st.StopReason != generate.StopLength {
		t.Errorf("capped: %v, step by step %v (%+v)", capE, capF, st)
	}
	for _, temp := range []float64{0.8, 1.5} {
		ids, _, st := runForced(t, m, pr, opts(true, 100, temp))
		if s := c.Decode(ids); (s != "{{{{{{yes}}}}}}" && s != "{{{{{{no}}}}}}") || st.StopReason != generate.StopEOS {
			t.Errorf("sampled at %g: %q (%s)", temp, s, st.StopReason)
		}
	}
}

// TestJumpForwardExactF32 runs exact jump-forward on the demo model
// loaded in float32, where a multi-token forward pass matches single
// steps to float32 rounding: the tokens and text must equal free-running
// step-by-step constrained greedy decoding on every schema and prompt,
// with one forward pass fewer per forced token — the criterion on
// the real model, no step-wise wrapper.
func TestJumpForwardExactF32(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	_, c, comp, _, eos := demoSetup(t)
	src, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	fm, err := model.Load(src, &model.LoadOptions{DType: tensor.Float32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	m := generate.Wrap(fm, fm.Info().Vocab)
	prompt := func(s string) []int32 { return c.Encode("<bos>" + s) }
	forcedTotal := 0
	for i, schema := range jumpSchemas {
		cg, err := comp.JSONSchema(schema, grammar.JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"Call me Ishmael. ", "The whale"} {
			opts := func(jump bool) *generate.Options {
				return &generate.Options{MaxTokens: 200, EOS: eos, Grammar: grammar.NewMatcher(cg), JumpForward: jump, JumpMode: generate.JumpExact}
			}
			cm := &countingModel{Model: m}
			free, _, stF := runForced(t, cm, prompt(p), opts(false))
			fF := cm.forwards
			cm = &countingModel{Model: m}
			ex, _, stE := runForced(t, cm, prompt(p), opts(true))
			fE := cm.forwards
			if !slices.Equal(free, ex) || c.Decode(free) != c.Decode(ex) || stF.StopReason != stE.StopReason {
				t.Errorf("schema %d %q: exact jump-forward on f32\n%s\nstep by step\n%s", i, p, c.Decode(ex), c.Decode(free))
			}
			if fE != fF-stE.ForcedTokens {
				t.Errorf("schema %d %q: %d forward passes with %d forced tokens, %d step by step", i, p, fE, stE.ForcedTokens, fF)
			}
			forcedTotal += stE.ForcedTokens
		}
	}
	if forcedTotal == 0 {
		t.Error("no token was forced: the test does not exercise jump-forward")
	}
}
