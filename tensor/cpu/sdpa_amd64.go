package cpu

// sdpaMaxAVX512 returns the largest of sc[0..n-1] (n ≥ 1) and ok, false
// when a NaN was seen or the largest is a zero: sdpaMax's Go loop decides
// those (sdpa_amd64.s).
//
//go:noescape
func sdpaMaxAVX512(sc *float32, n int) (m float32, ok bool)

// sdpaPanelSums sets sums[r] to the sum over j < nk of pan[8j+r], each
// lane added from +0 in j order: the probability sums of an 8-row panel's
// rows, as each row's own loop would add them (sdpa_amd64.s).
//
//go:noescape
func sdpaPanelSums(pan *float32, nk int, sums *[8]float32)
