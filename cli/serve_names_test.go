package main

import (
	"path/filepath"
	"testing"
)

// TestServedModelID: a served model's id is its repo id or its folder's
// name, never a path.
func TestServedModelID(t *testing.T) {
	root := t.TempDir()
	cases := []struct{ arg, dir, want string }{
		{"", filepath.Join(root, "whatever"), "mlxgo-demo"},
		{"qwen", filepath.Join(root, "hub", "models--Qwen--Qwen3-0.6B", "snapshots", "abc123"), "Qwen/Qwen3-0.6B"},
		{filepath.Join(root, "models", "my-model"), filepath.Join(root, "models", "my-model"), "my-model"},
		{"./m/", filepath.Join(root, "m") + "/", "m"},
	}
	for _, c := range cases {
		if got := servedModelID(c.arg, c.dir); got != c.want {
			t.Errorf("servedModelID(%q, %q) = %q, want %q", c.arg, c.dir, got, c.want)
		}
	}
	for host, want := range map[string]bool{"127.0.0.1": true, "localhost": true, "::1": true, "[::1]": true, "0.0.0.0": false, "10.1.2.3": false, "example.com": false} {
		if isLoopback(host) != want {
			t.Errorf("isLoopback(%q) = %v", host, !want)
		}
	}
}
