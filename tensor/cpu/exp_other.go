//go:build !amd64

package cpu

// ewExpConsts stands in for the amd64 kernels' constants.
type ewExpConsts struct{}

// ewExpK is unused off amd64.
var ewExpK ewExpConsts

// ewExpVector is false: there are no vector kernels off amd64.
var ewExpVector = false

// ewExpSumAVX512 is never called off amd64.
func ewExpSumAVX512(o, x *float32, n int, c float32, k *ewExpConsts) float64 {
	panic("unreachable")
}

// ewExpAVX512 is never called off amd64.
func ewExpAVX512(o, x *float32, n int, c float32, k *ewExpConsts) { panic("unreachable") }

// ewSigmoidAVX512 is never called off amd64.
func ewSigmoidAVX512(o, x *float32, n int, k *ewExpConsts) { panic("unreachable") }
