package cpu

import (
	"encoding/binary"
	"strings"
)

// cpuModel is the CPUID brand string (leaves 0x80000002–4).
var cpuModel = func() string {
	if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt < 0x80000004 {
		return ""
	}
	var b [48]byte
	for i := range 3 {
		a, bx, c, d := cpuid(0x80000002+uint32(i), 0)
		for j, v := range [4]uint32{a, bx, c, d} {
			binary.LittleEndian.PutUint32(b[16*i+4*j:], v)
		}
	}
	return strings.Join(strings.Fields(strings.TrimRight(string(b[:]), "\x00")), " ")
}()
