package mlxffi

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestRegistrationLoadsNothing runs in a fresh process (other tests load
// the library): importing the package registers "mlx" but opens nothing.
func TestRegistrationLoadsNothing(t *testing.T) {
	if os.Getenv("MLXFFI_LAZY_CHILD") == "1" {
		if !slices.Contains(tensor.Registered(), "mlx") {
			t.Fatal(`"mlx" is not registered`)
		}
		if LibraryPath() != "" || mlxThread.req != nil {
			t.Fatal("the library was loaded before first use")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRegistrationLoadsNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MLXFFI_LAZY_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
