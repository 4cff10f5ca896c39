package grammar

import (
	"fmt"
	"os"
)

func zzLog(s ...string) {
	if os.Getenv("ZZLOG") == "" {
		return
	}
	os.WriteFile(fmt.Sprintf("/tmp/zzlog_%d", os.Getpid()), []byte(fmt.Sprintf("%q", s)), 0o644)
}
