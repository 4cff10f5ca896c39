package tensor

import (
	"sync"
	"testing"
)

// TestGoroutineKey: the key (and the portable stack-parsed id) is the same
// on every call within a goroutine and differs between goroutines alive at
// the same time.
func TestGoroutineKey(t *testing.T) {
	for name, key := range map[string]func() uintptr{"goroutineKey": goroutineKey, "stackGoid": stackGoid} {
		const n = 16
		keys := make([]uintptr, n)
		var ready, wg sync.WaitGroup
		release := make(chan struct{})
		ready.Add(n)
		for i := range n {
			wg.Go(func() {
				k := key()
				ready.Done()
				<-release // all n are alive together
				if again := key(); again != k {
					t.Errorf("%s: %#x then %#x on one goroutine", name, k, again)
				}
				keys[i] = k
			})
		}
		ready.Wait()
		close(release)
		wg.Wait()
		seen := map[uintptr]bool{key(): true}
		for _, k := range keys {
			if k == 0 || seen[k] {
				t.Fatalf("%s: key %#x zero or shared by two live goroutines (%#x)", name, k, keys)
			}
			seen[k] = true
		}
	}
}
