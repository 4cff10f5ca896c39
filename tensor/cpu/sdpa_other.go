//go:build !amd64

package cpu

func sdpaMaxAVX512(sc *float32, n int) (float32, bool)     { panic("unreachable") }
func sdpaPanelSums(pan *float32, nk int, sums *[8]float32) { panic("unreachable") }
