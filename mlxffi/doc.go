// Package mlxffi binds MLX's C API (mlx-c) with purego, without cgo, and provides MLX as a tensor backend.
package mlxffi
