//go:build !amd64

package cpu

// Without the amd64 assembly there are no int8 kernels.
var q8Kernels = false

func q8Kernel(bits, r int, half bool, w *byte, x *byte, ldx, ng, cpg int, out *float32, ldo int) {
	panic("unreachable")
}
