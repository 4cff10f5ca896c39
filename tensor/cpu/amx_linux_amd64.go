package cpu

import (
	"fmt"
	"syscall"
	"unsafe"
)

// amxPermit asks Linux for the AMX tile data state (arch_prctl
// ARCH_REQ_XCOMP_PERM, since 5.16), which a process must hold before its
// first tile instruction; a kernel without it, or one that refuses,
// leaves the VNNI kernels in charge (the error says which).
func amxPermit() error {
	const getSupp, reqPerm, xtiledata = 0x1022, 0x1023, 18
	var supp uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, getSupp, uintptr(unsafe.Pointer(&supp)), 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_GET_XCOMP_SUPP): %v", e)
	}
	if supp&(1<<xtiledata) == 0 {
		return fmt.Errorf("the kernel offers no tile data state (xfeatures %#x)", supp)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, reqPerm, xtiledata, 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM): %v", e)
	}
	return nil
}
