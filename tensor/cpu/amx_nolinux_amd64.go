//go:build !linux

package cpu

import "errors"

// amxPermit: only Linux is asked for the tile state here.
func amxPermit() error { return errors.New("AMX tile state is requested on Linux only") }
