//go:build !amd64

package cpu

// cpuModel is unknown off amd64.
var cpuModel = ""
