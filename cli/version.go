package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu" // the embedded default backend
)

// version is the release version, set at build time with
// -ldflags "-X main.version=v0.1.0"; development builds say "dev".
var version = "dev"

// versionInfo is what `mlxgo version --json` prints.
type versionInfo struct {
	Version  string   `json:"version"`
	Commit   string   `json:"commit,omitempty"`
	Go       string   `json:"go"`
	Platform string   `json:"platform"`
	Backends []string `json:"backends"`
	Threads  int      `json:"threads"`
	// CPU is the processor's name, Kernels the CPU backend's instruction
	// sets in use (cpu.KernelFeatures), so that a benchmark's record says
	// which kernels produced it.
	CPU     string   `json:"cpu,omitempty"`
	Kernels []string `json:"cpu_kernels"`
}

func currentVersion() versionInfo {
	v := versionInfo{
		Version:  version,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Backends: tensor.Registered(),
		Threads:  runtime.GOMAXPROCS(0),
		CPU:      cpu.CPUModel(),
		Kernels:  cpu.KernelFeatures(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

func init() {
	register(&command{
		name:    "version",
		summary: "print the version, Go version, platform, available backends and the CPU kernels in use",
		run: func(args []string, _ io.Reader, stdout, stderr io.Writer) error {
			fs := newFlags("version", stderr)
			asJSON := fs.Bool("json", false, "print as JSON")
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			if fs.NArg() > 0 {
				return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
			}
			v := currentVersion()
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			fmt.Fprintf(stdout, "mlxgo %s", v.Version)
			if v.Commit != "" {
				fmt.Fprintf(stdout, " (%.12s)", v.Commit)
			}
			fmt.Fprintf(stdout, " %s %s backends=%v threads=%d", v.Go, v.Platform, v.Backends, v.Threads)
			if v.CPU != "" {
				fmt.Fprintf(stdout, " cpu=%q", v.CPU)
			}
			fmt.Fprintf(stdout, " kernels=%v\n", v.Kernels)
			return nil
		},
	})
}
