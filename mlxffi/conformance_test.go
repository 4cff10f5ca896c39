package mlxffi

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor/backendtest"
)

// TestConformance holds the MLX backend to the same suite as the CPU one.
func TestConformance(t *testing.T) { backendtest.Run(t, mlxBackend(t)) }
