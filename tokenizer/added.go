package tokenizer

import (
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens: a string that is
// matched in the text before the model sees it.
type AddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"` // match only as a whole word
	LStrip     bool   `json:"lstrip"`      // swallow whitespace on the left
	RStrip     bool   `json:"rstrip"`      // swallow whitespace on the right
	Normalized bool   `json:"normalized"`  // match in the normalized text, not the raw text
	Special    bool   `json:"special"`     // a control token, dropped by Decode with skipSpecial
}

// trie finds added tokens leftmost-longest, like the Aho-Corasick automaton
// HF builds with MatchKind::LeftmostLongest.
type trie struct {
	nodes []trieNode
	first [256]bool // bytes that can start a match
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into the token list, -1 if no token ends here
}

func newTrie() *trie { return &trie{nodes: []trieNode{{token: -1}}} }

func (t *trie) insert(s string, tok int) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	n := 0
	for i := 0; i < len(s); i++ {
		nd := &t.nodes[n]
		if nd.next == nil {
			nd.next = make(map[byte]int32, 1)
		}
		nx, ok := nd.next[s[i]]
		if !ok {
			nx = int32(len(t.nodes))
			t.nodes[n].next[s[i]] = nx
			t.nodes = append(t.nodes, trieNode{token: -1})
		}
		n = int(nx)
	}
	if t.nodes[n].token < 0 {
		t.nodes[n].token = int32(tok)
	}
}

// longestAt returns the token and end of the longest match starting at i.
func (t *trie) longestAt(s string, i int) (tok, end int) {
	tok, end = -1, -1
	n := 0
	for j := i; j < len(s); j++ {
		nx, ok := t.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = int(nx)
		if t.nodes[n].token >= 0 {
			tok, end = int(t.nodes[n].token), j+1
		}
	}
	return tok, end
}

// addedMatch is a piece of text: an added token (tok >= 0) or plain text.
type addedMatch struct {
	start, end int
	tok        int
}

// findAdded mirrors HF's AddedVocabulary::find_matches.
func findAdded(t *trie, toks []AddedToken, s string, dst []addedMatch) []addedMatch {
	if t == nil || s == "" {
		return append(dst, addedMatch{0, len(s), -1})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !t.first[s[i]] {
			i++
			continue
		}
		ti, stop := t.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		start := i
		i = stop
		at := &toks[ti]
		if at.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if at.LStrip {
			ns := start
			for ns > 0 {
				r, n := utf8.DecodeLastRuneInString(s[:ns])
				if !isWhiteSpace(r) {
					break
				}
				ns -= n
			}
			start = max(ns, startOffset)
		}
		if at.RStrip {
			for stop < len(s) {
				r, n := utf8.DecodeRuneInString(s[stop:])
				if !isWhiteSpace(r) {
					break
				}
				stop += n
			}
		}
		if startOffset < start {
			dst = append(dst, addedMatch{startOffset, start, -1})
		}
		dst = append(dst, addedMatch{start, stop, ti})
		startOffset = stop
	}
	if startOffset != len(s) {
		dst = append(dst, addedMatch{startOffset, len(s), -1})
	}
	return dst
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}
