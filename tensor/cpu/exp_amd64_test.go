package cpu

import "testing"

// TestEwExpConstsMatch: the constants the kernels read are the scalar
// loop's.
func TestEwExpConstsMatch(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	k := ewExpK
	if k.tab != ewExpTable || k.k != 32/ewLn2 || k.shift != ewShifter || k.l != ewLn2/32 ||
		k.sixth != 1.0/6 || k.half != 0.5 || k.one != 1 || k.hi != 88.8 || k.lo != -104 {
		t.Fatalf("ewExpK differs from the scalar constants: %+v", k)
	}
}
