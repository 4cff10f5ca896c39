package mlxffi

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// mlxBackend opens the MLX backend or skips the test with one line when
// libmlxc is not installed; any other failure to open it is a test failure.
func mlxBackend(t testing.TB) *Backend {
	t.Helper()
	be, err := Open()
	if errors.Is(err, ErrNotFound) {
		t.Skip("libmlxc not found: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// le32 is float32s as little-endian bytes (built on the host, so that it
// makes no array of the default backend).
func le32(v ...float32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, f := range v {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
	}
	return out
}
