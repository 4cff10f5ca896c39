package mlxffi

import (
	"github.com/mlxgo/mlxgo/tensor"
)

// LoadSafetensors opens a safetensors file with MLX's own loader. The
// arrays are lazy: MLX reads each tensor's bytes from the file when the
// array is first evaluated, so opening a large checkpoint is cheap. The
// caller owns the returned arrays.
func (be *Backend) LoadSafetensors(path string) (arrays map[string]*tensor.Array, meta map[string]string, err error) {
	arrays = map[string]*tensor.Array{}
	meta = map[string]string{}
	err = tensor.Try(func() {
		be.run("LoadSafetensors", func(c *cx) {
			var am, mm uintptr
			ck(mlx_load_safetensors(&am, &mm, path, c.s))
			defer mlx_map_string_to_array_free(am)
			defer mlx_map_string_to_string_free(mm)
			it := mlx_map_string_to_array_iterator_new(am)
			defer mlx_map_string_to_array_iterator_free(it)
			for {
				var k *byte
				var h uintptr
				if mlx_map_string_to_array_iterator_next(&k, &h, it) != 0 {
					break
				}
				// next hands out a new mlx_array (a reference of its own)
				arrays[goString(k)] = c.wrap(c.t(h))
			}
			sit := mlx_map_string_to_string_iterator_new(mm)
			defer mlx_map_string_to_string_iterator_free(sit)
			for {
				var k, v *byte
				if mlx_map_string_to_string_iterator_next(&k, &v, sit) != 0 {
					break
				}
				meta[goString(k)] = goString(v)
			}
		})
	})
	if err != nil {
		for _, a := range arrays {
			a.Free()
		}
		return nil, nil, err
	}
	return arrays, meta, nil
}

// SaveSafetensors writes arrays (evaluating them) and string metadata to
// path with MLX's writer.
func (be *Backend) SaveSafetensors(path string, arrays map[string]*tensor.Array, meta map[string]string) error {
	return tensor.Try(func() {
		be.run("SaveSafetensors", func(c *cx) {
			am := ckHandle(mlx_map_string_to_array_new())
			defer mlx_map_string_to_array_free(am)
			mm := ckHandle(mlx_map_string_to_string_new())
			defer mlx_map_string_to_string_free(mm)
			for k, a := range arrays {
				ck(mlx_map_string_to_array_insert(am, k, hOf(a)))
			}
			for k, v := range meta {
				ck(mlx_map_string_to_string_insert(mm, k, v))
			}
			ck(mlx_save_safetensors(path, am, mm))
		})
	})
}
