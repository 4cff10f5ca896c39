package tensor_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestScopesPerGoroutine: two goroutines with a scope each make arrays at
// the same time; each scope holds exactly its goroutine's arrays, and
// closing A's leaves B's alive.
func TestScopesPerGoroutine(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const n = 200
	var (
		made  sync.WaitGroup // both goroutines made their arrays
		aDone = make(chan struct{})
		arrsA []*tensor.Array
		arrsB []*tensor.Array
		lenA  int
		lenB  int
		bLive bool
	)
	made.Add(2)
	var wg sync.WaitGroup
	wg.Go(func() { // A
		s := tensor.NewScope()
		for i := range n {
			arrsA = append(arrsA, tensor.Full([]int{2}, float64(i), tensor.Float32))
		}
		lenA = s.Len()
		made.Done()
		made.Wait()
		s.Close()
		close(aDone)
	})
	wg.Go(func() { // B
		s := tensor.NewScope()
		for i := range n {
			arrsB = append(arrsB, tensor.Full([]int{3}, float64(i), tensor.Int32))
		}
		made.Done()
		<-aDone // A has closed its scope
		lenB = s.Len()
		bLive = true
		for _, a := range arrsB {
			bLive = bLive && !a.Freed()
		}
		s.Close()
	})
	wg.Wait()
	if lenA != n || lenB != n {
		t.Fatalf("scopes held %d and %d arrays, want %d each", lenA, lenB, n)
	}
	if !bLive {
		t.Fatal("closing goroutine A's scope freed arrays of goroutine B")
	}
	for i := range n {
		if !arrsA[i].Freed() || !arrsB[i].Freed() {
			t.Fatalf("array %d survived its goroutine's Close", i)
		}
	}
}

// TestArrayWithoutScopeIsUntracked: an array made on a goroutine with no
// open scope belongs to its maker, even while other goroutines have
// scopes open.
func TestArrayWithoutScopeIsUntracked(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	s := tensor.NewScope()
	var a *tensor.Array
	done := make(chan struct{})
	go func() {
		defer close(done)
		a = tensor.Zeros([]int{4}, tensor.Float32)
	}()
	<-done
	if s.Len() != 0 {
		t.Fatalf("scope of another goroutine adopted %d arrays", s.Len())
	}
	s.Close()
	if a.Freed() {
		t.Fatal("an array made on a goroutine without a scope was freed by another goroutine's Close")
	}
	a.Free()
}

// TestScopeWrongGoroutinePanics: Close and Keep from a goroutine other
// than the one that opened the scope panic with an *Error and change
// nothing; Free and Detach work from anywhere.
func TestScopeWrongGoroutinePanics(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	s := tensor.NewScope()
	a := tensor.Zeros([]int{2}, tensor.Float32)
	b := tensor.Zeros([]int{2}, tensor.Float32)
	c := tensor.Zeros([]int{2}, tensor.Float32)
	var closeErr, keepErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		closeErr = tensor.Try(s.Close)
		keepErr = tensor.Try(func() { s.Keep(a) })
		b.Free()
		tensor.Detach(c)
	}()
	<-done
	for name, err := range map[string]error{"Close": closeErr, "Keep": keepErr} {
		var te *tensor.Error
		if !errors.As(err, &te) || !errors.Is(err, tensor.ErrArgument) {
			t.Errorf("%s from another goroutine: %v, want an *Error wrapping ErrArgument", name, err)
		}
	}
	if a.Freed() || s.Len() != 1 {
		t.Fatalf("after the refused calls: a freed %v, scope holds %d (want alive, 1)", a.Freed(), s.Len())
	}
	s.Close()
	if !a.Freed() || c.Freed() {
		t.Fatalf("after Close: a freed %v (want true), detached c freed %v (want false)", a.Freed(), c.Freed())
	}
	c.Free()
}

// TestNestedScopesPerGoroutine: on several goroutines at once, nested
// scopes still pop LIFO, Keep moves an array to the goroutine's own outer
// scope, and closing the outer scope closes an inner one left open.
func TestNestedScopesPerGoroutine(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				outer := tensor.NewScope()
				_ = tensor.Zeros([]int{1}, tensor.Float32)
				inner := tensor.NewScope()
				k := inner.Keep(tensor.Full([]int{1}, float64(g), tensor.Float32))
				tmp := tensor.Zeros([]int{1}, tensor.Float32)
				inner.Close()
				if !tmp.Freed() || k.Freed() || outer.Len() != 2 {
					errs <- "inner Close: temporary alive, kept array freed or not moved to the outer scope"
				}
				if i%2 == 1 {
					_ = tensor.NewScope() // left open: the outer Close closes it
					_ = tensor.Zeros([]int{1}, tensor.Float32)
				}
				outer.Close()
				if !k.Freed() {
					errs <- "outer Close left the kept array alive"
				}
				if a := tensor.Zeros([]int{1}, tensor.Float32); a.Freed() {
					errs <- "array made after the outermost Close was freed"
				} else {
					a.Free()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestRunAs: work run under RunAs on another goroutine (a backend's
// thread) is attributed to the owner's scopes, as if the owner made it.
func TestRunAs(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	outer := tensor.NewScope()
	owner := tensor.CurrentScopeOwner()
	work := make(chan func())
	finished := make(chan any)
	go func() { // the backend's thread
		for f := range work {
			finished <- tensor.Try(f)
		}
	}()
	do := func(f func()) {
		work <- func() { tensor.RunAs(owner, f) }
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
	}
	defer close(work)

	var a, kept, tmp *tensor.Array
	do(func() { a = tensor.Zeros([]int{1}, tensor.Float32) })
	if outer.Len() != 1 {
		t.Fatalf("owner's scope holds %d arrays made under RunAs, want 1", outer.Len())
	}
	// A scope opened under RunAs is on the owner's stack; the owner can
	// close it, and Keep moves to the owner's scope.
	var inner *tensor.Scope
	do(func() {
		inner = tensor.NewScope()
		tmp = tensor.Zeros([]int{1}, tensor.Float32)
		kept = inner.Keep(tensor.Zeros([]int{1}, tensor.Float32))
	})
	_ = tensor.Zeros([]int{1}, tensor.Float32) // owner's own, in inner
	if inner.Len() != 2 {
		t.Fatalf("inner scope holds %d, want 2 (one from each goroutine)", inner.Len())
	}
	inner.Close()
	if !tmp.Freed() || kept.Freed() || outer.Len() != 2 {
		t.Fatalf("inner Close: tmp freed %v, kept freed %v, outer holds %d", tmp.Freed(), kept.Freed(), outer.Len())
	}
	// Nested RunAs for the goroutine's own stack, then back to the owner.
	var own *tensor.Array
	do(func() {
		self := make(chan tensor.ScopeOwner)
		go func() { self <- tensor.CurrentScopeOwner() }()
		tensor.RunAs(<-self, func() { own = tensor.Zeros([]int{1}, tensor.Float32) })
		_ = tensor.Zeros([]int{1}, tensor.Float32)
	})
	if outer.Len() != 3 {
		t.Fatalf("outer holds %d after the nested RunAs, want 3", outer.Len())
	}
	// The owner's scope may be closed from RunAs.
	do(outer.Close)
	if !a.Freed() || !kept.Freed() || own.Freed() {
		t.Fatalf("after Close under RunAs: a freed %v, kept freed %v (want both), other stack's array freed %v", a.Freed(), kept.Freed(), own.Freed())
	}
	own.Free()
	// Outside RunAs the thread's arrays are its own again: untracked.
	s := tensor.NewScope()
	defer s.Close()
	var after *tensor.Array
	work <- func() { after = tensor.Zeros([]int{1}, tensor.Float32) }
	<-finished
	if s.Len() != 0 {
		t.Fatal("an array made on the thread outside RunAs was adopted by the owner's scope")
	}
	after.Free()
}
