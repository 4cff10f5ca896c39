//go:build !amd64

package cpu

// Without the amd64 assembly qmmNUsable is false and this never runs.
func qmmNKern(w *byte, ldw int, xt, s, b *float32, lds, nk, rows int, acc *float32, bits int) {
	panic("unreachable")
}
