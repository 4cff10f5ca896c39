package serve

import (
	"container/list"
	"sync"
	"time"
)

// Defaults of the response store's Config fields.
const (
	DefaultResponseStoreTTL   = time.Hour
	DefaultResponseStoreBytes = 64 << 20
)

// storedResponse is a response kept for GET /v1/responses/{id} and
// previous_response_id: its JSON body and the conversation it ends (the
// messages it was generated from, instructions aside, and its reply).
type storedResponse struct {
	id      string
	body    []byte
	history []templateMessage
	bytes   int
	expires time.Time
}

// responseStore is the bounded in-memory store of responses: entries
// expire ttl after they are stored, and the oldest go first while the
// entries' bytes exceed max. Safe for concurrent use.
type responseStore struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int // bytes; ≤ 0 stores nothing
	now   func() time.Time
	byID  map[string]*list.Element
	order *list.List // of *storedResponse, oldest first
	bytes int
}

func newResponseStore(ttl time.Duration, maxBytes int) *responseStore {
	if ttl <= 0 {
		ttl = DefaultResponseStoreTTL
	}
	return &responseStore{ttl: ttl, max: maxBytes, now: time.Now, byID: map[string]*list.Element{}, order: list.New()}
}

// put stores e (its bytes already counted), evicting expired and then the
// oldest entries to stay within the byte cap; an entry larger than the
// whole cap is not kept.
func (st *responseStore) put(e *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e.bytes > st.max {
		return
	}
	now := st.now()
	e.expires = now.Add(st.ttl)
	if old, ok := st.byID[e.id]; ok {
		st.remove(old)
	}
	st.byID[e.id] = st.order.PushBack(e)
	st.bytes += e.bytes
	st.evict(now)
}

// get returns the live entry for id.
func (st *responseStore) get(id string) (*storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.evict(st.now())
	el, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	return el.Value.(*storedResponse), true
}

// delete drops id; false when it was not stored (or had expired).
func (st *responseStore) delete(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.evict(st.now())
	el, ok := st.byID[id]
	if ok {
		st.remove(el)
	}
	return ok
}

// stats returns the entries and bytes held.
func (st *responseStore) stats() (int, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.evict(st.now())
	return st.order.Len(), st.bytes
}

// evict drops expired entries (the list is in expiry order, every entry
// living ttl), then the oldest while over the cap. The caller holds mu.
func (st *responseStore) evict(now time.Time) {
	for el := st.order.Front(); el != nil; el = st.order.Front() {
		e := el.Value.(*storedResponse)
		if now.Before(e.expires) && st.bytes <= st.max {
			return
		}
		st.remove(el)
	}
}

func (st *responseStore) remove(el *list.Element) {
	e := st.order.Remove(el).(*storedResponse)
	delete(st.byID, e.id)
	st.bytes -= e.bytes
}
