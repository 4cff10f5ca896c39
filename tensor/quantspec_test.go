package tensor

import (
	"strings"
	"testing"
)

// TestQuantSpecValidate: every supported pair passes; an unsupported bit
// width or group size is named in the error.
func TestQuantSpecValidate(t *testing.T) {
	for _, b := range QuantBitsSupported {
		for _, g := range QuantGroupsSupported {
			if err := (QuantSpec{GroupSize: g, Bits: b}).Validate(); err != nil {
				t.Errorf("bits %d group %d: %v", b, g, err)
			}
		}
	}
	for _, c := range []struct {
		spec QuantSpec
		want string
	}{
		{QuantSpec{GroupSize: 64, Bits: 7}, "bits 7"},
		{QuantSpec{GroupSize: 48, Bits: 4}, "group size 48"},
		{QuantSpec{}, "bits 0"},
	} {
		err := c.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.spec, err, c.want)
		}
	}
}
