package mlxffi

import "syscall"

func threadID() int { return syscall.Gettid() }
