//go:build !amd64

package cpu

// Without the amd64 assembly there are no AMX kernels.

// AMXInt8 reports whether int8-activation products run on AMX tiles: never here.
func AMXInt8() bool { return false }

// AMXStatus says why the AMX path is off: it exists on amd64 only.
func AMXStatus() string { return "not an amd64 build" }

func amxUsable(rows, gs int) bool { return false }

func amxRun(out []float32, xq []byte, rows, ldx int, p *q8pack, n, k, gs int) {
	panic("unreachable")
}
