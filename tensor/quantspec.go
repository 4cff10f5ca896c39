package tensor

import (
	"fmt"
	"slices"
)

// QuantSpec is one affine quantization as MLX stores it: codes of Bits
// bits, with one scale and one bias per GroupSize consecutive values of a
// row. It is the one description of a quantization across the modules:
// checkpoint configs and converters (per layer of weights), the KV caches
// (per layer of the cache). The JSON names are mlx-lm's.
type QuantSpec struct {
	GroupSize int `json:"group_size"`
	Bits      int `json:"bits"`
}

// Validate reports, naming the value, a bit width or group size that
// MLX's affine kernels (and this package's) do not implement.
func (s QuantSpec) Validate() error {
	if !slices.Contains(QuantBitsSupported, s.Bits) {
		return fmt.Errorf("bits %d (supported: %v)", s.Bits, QuantBitsSupported)
	}
	if !slices.Contains(QuantGroupsSupported, s.GroupSize) {
		return fmt.Errorf("group size %d (supported: %v)", s.GroupSize, QuantGroupsSupported)
	}
	return nil
}
