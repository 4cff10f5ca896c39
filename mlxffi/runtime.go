package mlxffi

import (
	"fmt"
	"strings"
)

// call loads the library if needed, runs f on the MLX thread and turns an
// MLX failure inside it into an error.
func call(f func()) (err error) {
	if err := Load(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(*Error); ok {
				err = e
				return
			}
			panic(r)
		}
	}()
	Do(f)
	return nil
}

// Version returns the MLX version libmlxc reports (for example "0.31.2").
func Version() (v string, err error) {
	err = call(func() {
		s := mlx_string_new()
		ck(mlx_version(&s))
		v = mlxString(s)
	})
	return v, err
}

// DeviceType selects an MLX device kind.
type DeviceType int32

// Device kinds, numbered as mlx_device_type.
const (
	CPU DeviceType = 0
	GPU DeviceType = 1
)

// String returns "cpu" or "gpu".
func (d DeviceType) String() string {
	if d == GPU {
		return "gpu"
	}
	return "cpu"
}

// DeviceAvailable reports whether MLX can run on the device kind (GPU is
// Metal on macOS, CUDA where built with it; false on a CPU-only build).
// It is false as well when libmlxc does not load; HasGPU tells the two
// apart.
func DeviceAvailable(dt DeviceType) bool {
	ok, err := deviceAvailable(dt)
	return err == nil && ok
}

// HasGPU reports whether MLX has a GPU device (Metal, or CUDA where
// libmlxc was built with it). A CPU-only MLX build runs slower than the
// pure-Go CPU backend, so callers choosing a backend for speed want MLX
// only when this is true. It loads libmlxc first and returns Load's error
// when that fails (ErrNotFound when it is not installed).
func HasGPU() (bool, error) { return deviceAvailable(GPU) }

func deviceAvailable(dt DeviceType) (ok bool, err error) {
	err = call(func() {
		dev := ckHandle(mlx_device_new_type(int32(dt), 0))
		defer mlx_device_free(dev)
		ck(mlx_device_is_available(&ok, dev))
	})
	return ok, err
}

// DeviceCount is the number of devices of a kind.
func DeviceCount(dt DeviceType) (n int, err error) {
	err = call(func() {
		var c int32
		ck(mlx_device_count(&c, int32(dt)))
		n = int(c)
	})
	return n, err
}

// DefaultDeviceType is the kind of MLX's default device on the MLX thread.
func DefaultDeviceType() (dt DeviceType, err error) {
	err = call(func() {
		dev := mlx_device_new_type(0, 0)
		defer mlx_device_free(dev)
		ck(mlx_get_default_device(&dev))
		var t int32
		ck(mlx_device_get_type(&t, dev))
		dt = DeviceType(t)
	})
	return dt, err
}

// SetDefaultDevice makes a device kind MLX's default on the MLX thread;
// backends opened afterwards with DefaultDevice use it.
func SetDefaultDevice(dt DeviceType) error {
	return call(func() {
		dev := ckHandle(mlx_device_new_type(int32(dt), 0))
		defer mlx_device_free(dev)
		ck(mlx_set_default_device(dev))
	})
}

// DeviceInfo returns what MLX reports about a device (names, memory sizes),
// as strings. It is empty when the library has no device-info entry points.
func DeviceInfo(dt DeviceType) (info map[string]string, err error) {
	info = map[string]string{}
	if mlx_device_info_new == nil {
		return info, nil
	}
	err = call(func() {
		dev := ckHandle(mlx_device_new_type(int32(dt), 0))
		defer mlx_device_free(dev)
		inf := mlx_device_info_new()
		defer mlx_device_info_free(inf)
		ck(mlx_device_info_get(&inf, dev))
		var keys uintptr
		ck(mlx_device_info_get_keys(&keys, inf))
		defer mlx_vector_string_free(keys)
		for i := range mlx_vector_string_size(keys) {
			var k *byte
			ck(mlx_vector_string_get(&k, keys, i))
			key := goString(k)
			var isStr bool
			ck(mlx_device_info_is_string(&isStr, inf, key))
			if isStr {
				var v *byte
				ck(mlx_device_info_get_str(&v, inf, key))
				info[key] = goString(v)
			} else {
				var v uint64
				ck(mlx_device_info_get_size(&v, inf, key))
				info[key] = fmt.Sprint(v)
			}
		}
	})
	return info, err
}

// Stream is an MLX stream: a queue of work on one device. A Stream made by
// NewStream or DefaultStream must be released with Free.
type Stream struct{ h uintptr }

// DefaultStream returns the default stream of a device kind.
func DefaultStream(dt DeviceType) (s Stream, err error) {
	err = call(func() {
		if dt == GPU {
			s.h = ckHandle(mlx_default_gpu_stream_new())
		} else {
			s.h = ckHandle(mlx_default_cpu_stream_new())
		}
	})
	return s, err
}

// NewStream makes a new stream on a device kind, for work that should not
// queue behind the default stream's.
func NewStream(dt DeviceType) (s Stream, err error) {
	err = call(func() {
		dev := ckHandle(mlx_device_new_type(int32(dt), 0))
		defer mlx_device_free(dev)
		s.h = ckHandle(mlx_stream_new_device(dev))
	})
	return s, err
}

// Synchronize waits until everything queued on the stream has run.
func (s Stream) Synchronize() error { return call(func() { ck(mlx_synchronize(s.h)) }) }

// String describes the stream as MLX prints it.
func (s Stream) String() string {
	var out string
	if err := call(func() {
		str := mlx_string_new()
		ck(mlx_stream_tostring(&str, s.h))
		out = mlxString(str)
	}); err != nil {
		return "Stream(" + err.Error() + ")"
	}
	return strings.TrimSpace(out)
}

// Free releases the stream handle (the stream itself lives on in MLX).
func (s Stream) Free() {
	if s.h != 0 {
		_ = call(func() { mlx_stream_free(s.h) })
	}
}

// ---- memory ----

func getSize(f fnGetSz) (n uint64, err error) {
	err = call(func() { ck(f(&n)) })
	return n, err
}

func setSize(f fnSetSz, v uint64) (prev uint64, err error) {
	err = call(func() { ck(f(&prev, v)) })
	return prev, err
}

// ActiveMemory is the number of bytes held by live MLX arrays.
func ActiveMemory() (uint64, error) { return getSize(mlx_get_active_memory) }

// PeakMemory is the most active memory seen since start or ResetPeakMemory.
func PeakMemory() (uint64, error) { return getSize(mlx_get_peak_memory) }

// CacheMemory is the number of bytes MLX's allocator keeps for reuse.
func CacheMemory() (uint64, error) { return getSize(mlx_get_cache_memory) }

// MemoryLimit is the allocation limit MLX currently enforces.
func MemoryLimit() (uint64, error) { return getSize(mlx_get_memory_limit) }

// ResetPeakMemory restarts the PeakMemory high-water mark.
func ResetPeakMemory() error { return call(func() { ck(mlx_reset_peak_memory()) }) }

// ClearCache returns the allocator's cached buffers to the system.
func ClearCache() error { return call(func() { ck(mlx_clear_cache()) }) }

// SetMemoryLimit sets the allocation limit and returns the previous one.
func SetMemoryLimit(n uint64) (uint64, error) { return setSize(mlx_set_memory_limit, n) }

// SetCacheLimit bounds the allocator's cache and returns the previous bound.
func SetCacheLimit(n uint64) (uint64, error) { return setSize(mlx_set_cache_limit, n) }

// SetWiredLimit sets how much memory Metal may keep wired (resident) and
// returns the previous limit; it fails where there is no such notion.
func SetWiredLimit(n uint64) (uint64, error) { return setSize(mlx_set_wired_limit, n) }

// PeakMemory reports MLX's allocator high-water mark. As a Backend method
// it makes the backend satisfy generate.MemoryInfo, so the generation
// loop reports peak memory for MLX without an adapter. The mark is
// process-wide (MLX has one allocator), not per Backend.
func (be *Backend) PeakMemory() (uint64, error) { return PeakMemory() }

// ClearCache returns MLX's cached buffers to the system. As a Backend
// method it lets the generation loop drop prefill transients between
// chunks (generate.MemoryInfo) without an adapter.
func (be *Backend) ClearCache() error { return ClearCache() }
