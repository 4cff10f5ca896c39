package generate

import (
	"slices"
	"sync"

	"github.com/mlxgo/mlxgo/kv"
)

// PromptCache keeps KV cache snapshots keyed by the tokens they hold, so
// that a request whose prompt starts like an earlier one (the next turn of
// a chat, a shared system prompt) prefills only what is new. It is an LRU
// capped by the bytes the caches hold, and safe for concurrent use.
//
// Entries are cloned on Take (clones share storage copy-on-write, so a
// take is cheap and the entry stays valid for other requests).
//
// Entries live in namespaces (TakeIn, PutIn): KV computed by one model
// variant (a set of LoRA adapters: Options.CacheNamespace) is only ever
// served to requests of that namespace. Take and Put use the base
// model's, "". The byte cap and the LRU order are shared by all.
type PromptCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	entries  []*pcEntry // least recently used first
}

type pcEntry struct {
	ns     string
	tokens []int32
	caches []kv.Cache
	bytes  int
	// whole is true when some cache cannot be trimmed (a rotating cache
	// past its window): the entry then only serves prompts that extend all
	// of its tokens.
	whole bool
}

// NewPromptCache makes a cache holding at most maxBytes of KV (as reported
// by kv.Cache.Bytes; clones sharing storage are counted in full).
func NewPromptCache(maxBytes int) *PromptCache {
	return &PromptCache{maxBytes: maxBytes}
}

func cachesBytes(cs []kv.Cache) int {
	n := 0
	for _, c := range cs {
		if c != nil {
			n += c.Bytes()
		}
	}
	return n
}

func freeCaches(cs []kv.Cache) {
	for _, c := range cs {
		if c != nil {
			c.Free()
		}
	}
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// match is how many of prompt's tokens e can provide (0: none): the
// common prefix, at most len(prompt)−1 so that at least one token is left
// to compute the first logits from; all of e's tokens when it cannot be trimmed.
func (e *pcEntry) match(prompt []int32) int {
	n := min(commonPrefix(e.tokens, prompt), len(prompt)-1)
	if e.whole && n != len(e.tokens) {
		return 0
	}
	return max(n, 0)
}

// Take returns clones of the caches of the entry sharing the longest
// prefix with prompt (at most len(prompt)−1 tokens), trimmed to that
// prefix, and the number of tokens they hold. The caller owns the
// returned caches (pass them as Options.Caches, then Put or free them).
// It returns nil, 0 when no entry matches. It looks only at the base
// model's namespace: TakeIn("", prompt).
func (p *PromptCache) Take(prompt []int32) ([]kv.Cache, int) { return p.TakeIn("", prompt) }

// TakeIn is Take among the entries of namespace ns.
func (p *PromptCache) TakeIn(ns string, prompt []int32) ([]kv.Cache, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestN := -1, 0
	for i, e := range p.entries {
		if e.ns != ns {
			continue
		}
		if n := e.match(prompt); n > bestN || (n == bestN && n > 0 && len(e.tokens) < len(p.entries[best].tokens)) {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return nil, 0
	}
	e := p.entries[best]
	p.entries = append(slices.Delete(p.entries, best, best+1), e) // most recently used
	out := make([]kv.Cache, len(e.caches))
	for i, c := range e.caches {
		if c == nil {
			continue
		}
		out[i] = c.Clone()
		if extra := c.Offset() - bestN; extra > 0 {
			if out[i].Trim(extra) != extra {
				freeCaches(out)
				return nil, 0
			}
		}
	}
	return out, bestN
}

// Put stores caches holding exactly tokens (Stats.CacheTokens of the
// generation that filled them, or the prefix given to OnPrefillDone) and
// takes ownership of them. An entry with the same tokens is replaced, and
// entries whose tokens are a prefix of these are dropped when this entry
// can be trimmed (it serves every prompt they would, as well). Least
// recently used entries are evicted to stay under the byte cap; caches
// larger than the cap are freed at once. It stores into the base model's
// namespace: PutIn("", tokens, caches).
func (p *PromptCache) Put(tokens []int32, caches []kv.Cache) { p.PutIn("", tokens, caches) }

// PutIn is Put into namespace ns: the entry serves TakeIn(ns, …) alone,
// and replaces or drops only entries of ns.
func (p *PromptCache) PutIn(ns string, tokens []int32, caches []kv.Cache) {
	e := &pcEntry{ns: ns, tokens: slices.Clone(tokens), caches: caches, bytes: cachesBytes(caches)}
	for _, c := range caches {
		if c != nil && !c.IsTrimmable() {
			e.whole = true
		}
	}
	if len(tokens) == 0 || e.bytes > p.maxBytes {
		freeCaches(caches)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.entries[:0]
	for _, old := range p.entries {
		redundant := old.ns == ns && (slices.Equal(old.tokens, e.tokens) ||
			(!e.whole && len(old.tokens) < len(e.tokens) && slices.Equal(old.tokens, e.tokens[:len(old.tokens)])))
		if redundant {
			p.bytes -= old.bytes
			freeCaches(old.caches)
			continue
		}
		keep = append(keep, old)
	}
	clear(p.entries[len(keep):])
	p.entries = append(keep, e)
	p.bytes += e.bytes
	for p.bytes > p.maxBytes && len(p.entries) > 1 {
		old := p.entries[0]
		p.entries = slices.Delete(p.entries, 0, 1)
		p.bytes -= old.bytes
		freeCaches(old.caches)
	}
}

// Len is the number of entries.
func (p *PromptCache) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Bytes is the KV memory the entries hold.
func (p *PromptCache) Bytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// ClearIn frees the entries of namespace ns (those of an adapter set
// that can no longer be chosen) and returns how many there were.
func (p *PromptCache) ClearIn(ns string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.entries[:0]
	n := 0
	for _, e := range p.entries {
		if e.ns == ns {
			p.bytes -= e.bytes
			freeCaches(e.caches)
			n++
			continue
		}
		keep = append(keep, e)
	}
	clear(p.entries[len(keep):])
	p.entries = keep
	return n
}

// Clear frees every entry.
func (p *PromptCache) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.entries {
		freeCaches(e.caches)
	}
	p.entries = nil
	p.bytes = 0
}
