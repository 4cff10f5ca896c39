package mlxffi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// EnvLibrary names the environment variable that, when set, gives the path
// of libmlxc (a file) or of the directory holding it; it is tried before
// every standard place so a user can pin one build.
const EnvLibrary = "MLXGO_LIBMLXC"

// ErrNotFound is wrapped by the error Load returns when no libmlxc could be
// opened, so callers (the CLI's --backend auto) can fall back to the CPU
// backend without string matching.
var ErrNotFound = errors.New("libmlxc not found")

var (
	loadOnce sync.Once
	loadErr  error
	loadedAt string
)

// Load opens libmlxc and binds every function the package uses. It runs
// once per process; later calls return the first result. Nothing in this
// package calls it before an MLX feature is used, so a program that never
// touches MLX never loads the library.
func Load() error {
	loadOnce.Do(func() {
		loadErr = load()
		if loadErr == nil {
			startWorker()
			installErrorHandler()
		}
	})
	return loadErr
}

// LibraryPath is the file Load opened ("" before a successful Load).
func LibraryPath() string { return loadedAt }

func libNames() (mlxc, mlx string) {
	if runtime.GOOS == "darwin" {
		return "libmlxc.dylib", "libmlx.dylib"
	}
	return "libmlxc.so", "libmlx.so"
}

// searchPaths lists the candidate libmlxc files in the order Load tries them.
func searchPaths() []string {
	name, _ := libNames()
	var paths []string
	if env := os.Getenv(EnvLibrary); env != "" {
		if st, err := os.Stat(env); err == nil && st.IsDir() {
			paths = append(paths, filepath.Join(env, name))
		} else {
			paths = append(paths, env)
		}
	}
	dirs := []string{"/usr/local/lib", "/usr/lib"}
	if runtime.GOOS == "darwin" {
		dirs = append([]string{"/opt/homebrew/lib"}, dirs...)
	} else {
		dirs = append(dirs, "/usr/lib/"+gnuTriplet())
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "mlxgo", "lib"))
	}
	for _, d := range dirs {
		paths = append(paths, filepath.Join(d, name))
	}
	return paths
}

func gnuTriplet() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

func load() error { return loadFrom(searchPaths()) }

// loadFrom opens the first candidate that loads and binds.
func loadFrom(paths []string) error {
	var tried []string
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			tried = append(tried, p+" (absent)")
			continue
		}
		// libmlxc needs libmlx; open the sibling first with RTLD_GLOBAL so the
		// dependency resolves even when the directory is not on the loader's
		// search path (a per-user cache dir, say).
		_, mlxName := libNames()
		if sib := filepath.Join(filepath.Dir(p), mlxName); fileExists(sib) {
			if _, err := purego.Dlopen(sib, purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
				tried = append(tried, fmt.Sprintf("%s (%v)", sib, err))
				continue
			}
		}
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		if err := bindAll(h); err != nil {
			return fmt.Errorf("mlxffi: %s: %w", p, err)
		}
		loadedAt = p
		return nil
	}
	return fmt.Errorf("%w; tried: %s. Build MLX and mlx-c as shared libraries "+
		"(or `brew install mlx-c` on macOS) and install them in one of these places, "+
		"or set %s to the library's path", ErrNotFound, strings.Join(tried, ", "), EnvLibrary)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// bindAll resolves every entry of the binding table, collecting the names
// of missing symbols into one error instead of failing on the first.
func bindAll(h uintptr) error {
	var missing []string
	for _, b := range bindings {
		sym, err := purego.Dlsym(h, b.Name)
		if err != nil || sym == 0 {
			if !b.Optional {
				missing = append(missing, b.Name)
			}
			continue
		}
		purego.RegisterFunc(b.Fn, sym)
	}
	if len(missing) > 0 {
		return fmt.Errorf("library lacks %d bound functions (%s): is it mlx-c 0.6 or newer?",
			len(missing), strings.Join(missing, ", "))
	}
	return nil
}
