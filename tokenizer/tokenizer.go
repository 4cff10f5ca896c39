package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Tokenizer encodes text to token ids and decodes ids to text exactly as Hugging
// Face tokenizers does for the same tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	model      model
	normalizer normalizer    // nil: none
	pre        preTokenizer  // nil: none
	post       postProcessor // nil: none
	decoder    decoder       // nil: tokens joined with spaces

	added      []AddedToken
	addedByID  map[int]int // id → index in added
	addedByStr map[string]int
	rawTrie    *trie // tokens with normalized=false, matched in the raw text
	normTrie   *trie // tokens with normalized=true, matched in normalized text
	special    map[int]bool
	specialStr map[string]bool // contents of special tokens (HF checks by content)
	decodeForm map[int]string  // normalized form of normalized added tokens, used by Decode
	maxID      int

	// Config is what tokenizer_config.json, special_tokens_map.json and
	// generation_config.json said, when the tokenizer was loaded with Load.
	Config Config

	// addBOS/addEOS are set when tokenizer_config.json asks for BOS/EOS and
	// tokenizer.json has no post-processor that would add them.
	addBOS, addEOS []int
}

func fieldErr(path string, err error) error {
	return &FieldError{File: "tokenizer.json", Field: path, Err: err}
}

// typeErr is the error for a component whose "type" is missing or is not
// one of the supported types of its kind.
func typeErr(path, kind, typ string, supported map[string]bool) error {
	if typ == "" {
		return fieldErr(path+".type", fmt.Errorf("missing"))
	}
	return fieldErr(path+".type", &UnsupportedError{kind, typ, keys(supported)})
}

// parseSequence parses the components of a Sequence with parse, naming
// element i path[i].
func parseSequence[T any](raws []json.RawMessage, path string, parse func(json.RawMessage, string) (T, error)) ([]T, error) {
	var out []T
	for i, r := range raws {
		x, err := parse(r, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// Load reads a model folder: tokenizer.json, and, where present,
// tokenizer_config.json, special_tokens_map.json, generation_config.json and
// chat_template.jinja / chat_template.json.
func Load(dir string) (*Tokenizer, error) {
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	t, err := New(data)
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(dir)
	if err != nil {
		return nil, err
	}
	t.setConfig(cfg)
	return t, nil
}

// New builds a tokenizer from the contents of a tokenizer.json file.
func New(tokenizerJSON []byte) (*Tokenizer, error) {
	fields, err := objectFields(tokenizerJSON)
	if err != nil {
		return nil, fieldErr("", err)
	}
	var addedTokens []json.RawMessage
	if present(fields["added_tokens"]) {
		if err := json.Unmarshal(fields["added_tokens"], &addedTokens); err != nil {
			return nil, fieldErr("added_tokens", err)
		}
	}
	t := &Tokenizer{addedByID: map[int]int{}, addedByStr: map[string]int{}, special: map[int]bool{},
		specialStr: map[string]bool{}, decodeForm: map[int]string{}}
	if t.model, err = parseModel(fields["model"], "model"); err != nil {
		return nil, err
	}
	if raw := fields["normalizer"]; present(raw) {
		if t.normalizer, err = parseNormalizer(raw, "normalizer"); err != nil {
			return nil, err
		}
	}
	if raw := fields["pre_tokenizer"]; present(raw) {
		if t.pre, err = parsePreTokenizer(raw, "pre_tokenizer"); err != nil {
			return nil, err
		}
	}
	if raw := fields["post_processor"]; present(raw) {
		if t.post, err = parsePostProcessor(raw, "post_processor"); err != nil {
			return nil, err
		}
	}
	if raw := fields["decoder"]; present(raw) {
		if t.decoder, err = parseDecoder(raw, "decoder"); err != nil {
			return nil, err
		}
	}
	t.maxID = t.model.size() - 1
	// Ids as HF's AddedVocabulary::add_tokens assigns them: the id of the same
	// content already added or in the model vocabulary, else the next free id.
	// The "id" written in the file is not used (HF only warns when it differs).
	nextID := t.model.count()
	for i, r := range addedTokens {
		var at AddedToken
		if err := json.Unmarshal(r, &at); err != nil {
			return nil, fieldErr(fmt.Sprintf("added_tokens[%d]", i), err)
		}
		if at.Content == "" {
			continue // HF ignores empty tokens
		}
		if idx, ok := t.addedByStr[at.Content]; ok {
			at.ID = t.added[idx].ID
			t.added[idx] = at
		} else {
			if id, ok := t.model.tokenID(at.Content); ok {
				at.ID = id
			} else {
				at.ID = nextID
				nextID++
			}
			t.addedByID[at.ID] = len(t.added)
			t.addedByStr[at.Content] = len(t.added)
			t.added = append(t.added, at)
		}
		if at.Special {
			t.special[at.ID] = true
			t.specialStr[at.Content] = true
		}
		if at.Normalized && t.normalizer != nil {
			if n := t.normalizer.normalize(at.Content); n != at.Content {
				t.decodeForm[at.ID] = n
			}
		}
		t.maxID = max(t.maxID, at.ID)
	}
	// Build the two tries; HF sorts neither, and leftmost-longest matching
	// makes the order irrelevant except for duplicates (first wins).
	for i, at := range t.added {
		if at.Normalized {
			if t.normTrie == nil {
				t.normTrie = newTrie()
			}
			content := at.Content
			if t.normalizer != nil {
				content = t.normalizer.normalize(content)
			}
			t.normTrie.insert(content, i)
		} else {
			if t.rawTrie == nil {
				t.rawTrie = newTrie()
			}
			t.rawTrie.insert(at.Content, i)
		}
	}
	return t, nil
}

func present(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	return len(r) > 0 && string(r) != "null"
}

// Encode returns the token ids of text. With addSpecial, the post-processor's
// special tokens (such as BOS) are added, as HF's add_special_tokens=True.
// Invalid UTF-8 is encoded byte by byte where the model can (byte-level or
// byte-fallback vocabularies) and never panics.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids := t.encode(text, make([]int, 0, len(text)/3+4))
	if !addSpecial {
		return ids
	}
	if t.post != nil {
		ids = t.post.process(ids)
	}
	if len(t.addBOS) > 0 || len(t.addEOS) > 0 {
		out := make([]int, 0, len(ids)+2)
		out = append(append(append(out, t.addBOS...), ids...), t.addEOS...)
		return out
	}
	return ids
}

func (t *Tokenizer) encode(text string, dst []int) []int {
	var rawBuf, normBuf [8]addedMatch
	for _, m := range findAdded(t.rawTrie, t.added, text, rawBuf[:0]) {
		if m.tok >= 0 {
			dst = append(dst, t.added[m.tok].ID)
			continue
		}
		if m.end <= m.start {
			continue
		}
		s := text[m.start:m.end]
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		for _, n := range findAdded(t.normTrie, t.added, s, normBuf[:0]) {
			if n.tok >= 0 {
				dst = append(dst, t.added[n.tok].ID)
				continue
			}
			if n.end <= n.start {
				continue
			}
			p := piece{s[n.start:n.end], m.start == 0 && n.start == 0}
			if t.pre == nil {
				dst = t.model.tokenize(p.s, dst)
				continue
			}
			t.pre.split(p, func(q piece) {
				if q.s != "" {
					dst = t.model.tokenize(q.s, dst)
				}
			})
		}
	}
	return dst
}

// Decode returns the text of ids, as HF's decode. With skipSpecial, special
// added tokens are left out. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		var tok string
		var ok bool
		if len(t.decodeForm) > 0 {
			tok, ok = t.decodeForm[id]
		}
		if !ok {
			if tok, ok = t.Token(id); !ok {
				continue
			}
		}
		if skipSpecial && t.specialStr[tok] {
			continue
		}
		toks = append(toks, tok)
	}
	return t.decodeTokens(toks)
}

func (t *Tokenizer) decodeTokens(toks []string) string {
	if t.decoder == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.decoder.decodeChain(toks), "")
}

// Token returns the string of id: the added token's content, or the model's
// vocabulary entry.
func (t *Tokenizer) Token(id int) (string, bool) {
	if i, ok := t.addedByID[id]; ok {
		return t.added[i].Content, true
	}
	return t.model.idToken(id)
}

// ID returns the id of a token string (an added token or a vocabulary entry).
func (t *Tokenizer) ID(token string) (int, bool) {
	if i, ok := t.addedByStr[token]; ok {
		return t.added[i].ID, true
	}
	return t.model.tokenID(token)
}

// VocabSize is one more than the largest id (model vocabulary and added tokens).
func (t *Tokenizer) VocabSize() int { return t.maxID + 1 }

// IsSpecial reports whether id is a special added token (such as BOS or
// <|im_end|>).
func (t *Tokenizer) IsSpecial(id int) bool { return t.special[id] }

// AddedTokens returns the added tokens, sorted by id.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := append([]AddedToken(nil), t.added...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
