package tensor

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Scope frees every array made while it is the innermost open scope of
// the goroutine that opened it, except those kept. Each goroutine has its
// own stack of scopes: an array is tracked by the innermost open scope of
// the goroutine that made it, and an array made on a goroutine with no
// open scope is tracked by none (its maker frees it). So several
// goroutines (a server's streams, a draft model beside its target) can
// each run their own scopes at once without adopting each other's arrays.
//
// Scopes nest LIFO. Close and Keep must be called on the goroutine that
// opened the scope (they panic with an *Error otherwise), and a scope must
// be closed before its goroutine exits: the runtime may give a later
// goroutine the same identity, which would then inherit the scope left
// open. Free and Detach work from any goroutine.
//
//	s := tensor.NewScope()
//	defer s.Close()
//	y := tensor.Add(x, tensor.Exp(x)) // the temporary Exp is freed by Close
//	s.Keep(y)                          // y moves to the enclosing scope
//
// A backend that makes arrays on a goroutine of its own on behalf of a
// caller (MLX's locked thread) runs that work under RunAs, so the arrays
// go to the caller's scopes as if the caller had made them.
type Scope struct {
	arrays map[*Array]struct{}
	parent *Scope
	owner  uintptr // goroutineKey of the stack the scope is on
	closed bool
}

// scopes is every goroutine's scope stack. One mutex guards it all: a
// tracked array costs one uncontended lock and two map operations, and
// NewArray skips even that while no scope is open anywhere.
var scopes struct {
	mu sync.Mutex
	// top maps a goroutine to its innermost open scope; a goroutine with
	// none has no entry, so the map does not grow with goroutines that
	// come and go.
	top map[uintptr]*Scope
	// lent maps a goroutine running RunAs to the goroutine it acts for.
	lent map[uintptr]uintptr
	// open counts open scopes over all goroutines.
	open atomic.Int64
}

func init() {
	scopes.top = map[uintptr]*Scope{}
	scopes.lent = map[uintptr]uintptr{}
}

// stackOf is the stack a goroutine's scope operations use: its own, or
// the one it acts for under RunAs. The caller holds scopes.mu.
func stackOf(g uintptr) uintptr {
	if len(scopes.lent) > 0 {
		if o, ok := scopes.lent[g]; ok {
			return o
		}
	}
	return g
}

// track registers a new array with the innermost open scope of the
// calling goroutine, if it has one.
func track(a *Array) {
	if scopes.open.Load() == 0 {
		return
	}
	g := goroutineKey()
	scopes.mu.Lock()
	if top := scopes.top[stackOf(g)]; top != nil {
		top.arrays[a] = struct{}{}
		a.scope = top
	}
	scopes.mu.Unlock()
}

// NewScope opens a scope nested in the calling goroutine's current one.
func NewScope() *Scope {
	g := goroutineKey()
	scopes.mu.Lock()
	defer scopes.mu.Unlock()
	o := stackOf(g)
	s := &Scope{arrays: map[*Array]struct{}{}, parent: scopes.top[o], owner: o}
	scopes.top[o] = s
	scopes.open.Add(1)
	return s
}

// checkOwner panics unless the calling goroutine (key g) is on s's stack.
// The caller holds scopes.mu, which this releases before panicking.
func (s *Scope) checkOwner(g uintptr, op string) {
	if stackOf(g) != s.owner {
		scopes.mu.Unlock()
		panic(&Error{Op: op, Err: fmt.Errorf("%w: scope used on a goroutine other than the one that opened it", ErrArgument)})
	}
}

// forget drops a from the scope tracking it (if any still does).
func forget(a *Array) {
	scopes.mu.Lock()
	if s := a.scope; s != nil {
		delete(s.arrays, a)
		a.scope = nil
	}
	scopes.mu.Unlock()
}

// Keep moves arrays out of s into its parent scope (or leaves them
// untracked, owned by the caller, when s is outermost). It returns its
// first argument for convenience. It must be called on s's goroutine.
func (s *Scope) Keep(arrs ...*Array) *Array {
	g := goroutineKey()
	scopes.mu.Lock()
	s.checkOwner(g, "Scope.Keep")
	for _, a := range arrs {
		if a == nil || a.scope != s {
			continue
		}
		delete(s.arrays, a)
		a.scope = nil
		if s.parent != nil && !s.parent.closed {
			s.parent.arrays[a] = struct{}{}
			a.scope = s.parent
		}
	}
	scopes.mu.Unlock()
	if len(arrs) == 0 {
		return nil
	}
	return arrs[0]
}

// Close frees every array still in the scope and pops it. Scopes opened
// inside it and left open are closed first (their arrays freed too).
// Closing twice is a no-op. It must be called on s's goroutine.
func (s *Scope) Close() {
	g := goroutineKey()
	scopes.mu.Lock()
	s.checkOwner(g, "Scope.Close")
	if s.closed {
		scopes.mu.Unlock()
		return
	}
	// An open scope is on its owner's stack, at the top or below scopes
	// left open inside it: pop down to it.
	var arrs []*Array
	for t := scopes.top[s.owner]; ; t = t.parent {
		t.closed = true
		scopes.open.Add(-1)
		for a := range t.arrays {
			a.scope = nil
			arrs = append(arrs, a)
		}
		t.arrays = nil
		if t == s {
			break
		}
	}
	if s.parent != nil {
		scopes.top[s.owner] = s.parent
	} else {
		delete(scopes.top, s.owner)
	}
	scopes.mu.Unlock()
	for _, a := range arrs {
		a.Free()
	}
}

// Detach takes arrays out of whatever scope tracks them, so that closing
// it leaves them alive: long-lived state made during a step (a KV cache's
// buffers, made inside the step's scope) belongs to its owner, which frees
// it explicitly. Untracked and nil arrays are ignored. It may be called
// from any goroutine.
func Detach(arrs ...*Array) {
	scopes.mu.Lock()
	defer scopes.mu.Unlock()
	for _, a := range arrs {
		if a == nil {
			continue
		}
		if s := a.scope; s != nil {
			delete(s.arrays, a)
			a.scope = nil
		}
	}
}

// Len is the number of arrays the scope would free now.
func (s *Scope) Len() int {
	scopes.mu.Lock()
	defer scopes.mu.Unlock()
	return len(s.arrays)
}

// WithScope runs f in a new scope and frees everything f made except the
// arrays it returns, which are kept (moved to the enclosing scope).
func WithScope(f func() []*Array) []*Array {
	s := NewScope()
	defer s.Close()
	out := f()
	s.Keep(out...)
	return out
}

// ScopeOwner identifies a goroutine's scope stack, so that a backend doing
// a caller's work on another goroutine can attribute the arrays it makes
// to the caller (see RunAs). Get one with CurrentScopeOwner.
type ScopeOwner struct{ g uintptr }

// CurrentScopeOwner returns the calling goroutine's scope stack (the one
// it acts for, inside RunAs).
func CurrentScopeOwner() ScopeOwner {
	g := goroutineKey()
	scopes.mu.Lock()
	defer scopes.mu.Unlock()
	return ScopeOwner{stackOf(g)}
}

// RunAs runs f on the calling goroutine as if o's goroutine ran it: arrays
// f makes go to o's innermost open scope, scopes f opens go on o's stack,
// and f may close and keep o's scopes. It is for backends that run a
// caller's tensor work on a goroutine of their own while the caller waits
// (MLX's locked thread): o's goroutine must not use its scopes until f
// returns. RunAs calls nest; each restores what the goroutine acted for
// before, also when f panics.
func RunAs(o ScopeOwner, f func()) {
	g := goroutineKey()
	scopes.mu.Lock()
	prev, had := scopes.lent[g]
	scopes.lent[g] = o.g
	scopes.mu.Unlock()
	defer func() {
		scopes.mu.Lock()
		if had {
			scopes.lent[g] = prev
		} else {
			delete(scopes.lent, g)
		}
		scopes.mu.Unlock()
	}()
	f()
}
