package cpu

// qmmNKern adds nk packed rows of one 32-column block (4- or 8-bit codes,
// ldw bytes apart; float32 scale and bias of the block's group at s and b,
// lds bytes apart) times the transposed x chunk xt (8 floats per row k)
// into the 8×32 accumulator block acc, for the first rows x rows. See
// qmmn_amd64.s.
//
//go:noescape
func qmmNKern(w *byte, ldw int, xt, s, b *float32, lds, nk, rows int, acc *float32, bits int)
