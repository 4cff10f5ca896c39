package cpu_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor/backendtest"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestConformance runs the backend-independent conformance suite on the CPU backend.
func TestConformance(t *testing.T) { backendtest.Run(t, cpu.Default) }
