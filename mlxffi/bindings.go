package mlxffi

import (
	"fmt"
	"reflect"
	"strings"
)

// C ABI notes. Every mlx-c handle type (mlx_array, mlx_stream, mlx_device,
// mlx_vector_array, mlx_closure, mlx_string, mlx_map_*) is a struct of one
// pointer; passed or returned by value it travels exactly like a pointer on
// amd64 and arm64, so the Go side declares it uintptr. The mlx_optional_*
// structs ({int|float|enum value; bool has_value}, 8 bytes) and the map
// iterators ({void* ctx; void* map_ctx}, 16 bytes) are passed as Go structs
// of the same layout, which purego lowers by the platform's struct rules
// (supported on linux and darwin, amd64 and arm64). size_t is uint64: only
// 64-bit platforms are supported. Pointers to caller-owned outputs are Go
// pointers (*uintptr, *int32, ...), live only for the call.

// optionalInt mirrors mlx_optional_int.
type optionalInt struct {
	Value    int32
	HasValue bool
}

// optionalFloat mirrors mlx_optional_float.
type optionalFloat struct {
	Value    float32
	HasValue bool
}

// optionalDType mirrors mlx_optional_dtype.
type optionalDType struct {
	Value    int32
	HasValue bool
}

// mapIter mirrors the mlx_map_*_iterator structs.
type mapIter struct {
	Ctx    uintptr
	MapCtx uintptr
}

func someInt(v int) optionalInt { return optionalInt{Value: int32(v), HasValue: true} }

// Function shapes shared by many entry points.
type (
	fnUnary  = func(res *uintptr, a, s uintptr) int32
	fnBinary = func(res *uintptr, a, b, s uintptr) int32
	fnAxes   = func(res *uintptr, a uintptr, axes *int32, n uint64, keep bool, s uintptr) int32
	fnAxis   = func(res *uintptr, a uintptr, axis int32, keep bool, s uintptr) int32
	fnShape  = func(res *uintptr, a uintptr, shape *int32, n uint64, s uintptr) int32
	fnFree   = func(h uintptr) int32
	fnNew    = func() uintptr
	fnGetSz  = func(res *uint64) int32
	fnSetSz  = func(res *uint64, limit uint64) int32
	fnVoidRC = func() int32
)

// ---- arrays, strings, vectors, maps ----
var (
	mlx_array_new_data                 func(data *byte, shape *int32, dim int32, dtype int32) uintptr
	mlx_array_new_data_managed_payload func(data *byte, shape *int32, dim int32, dtype int32, payload uintptr, dtor uintptr) uintptr
	mlx_array_new                      fnNew
	mlx_array_free                     fnFree
	mlx_array_set                      func(arr *uintptr, src uintptr) int32
	mlx_array_ndim                     func(a uintptr) uint64
	mlx_array_size                     func(a uintptr) uint64
	mlx_array_shape                    func(a uintptr) *int32
	mlx_array_strides                  func(a uintptr) *uint64
	mlx_array_dtype                    func(a uintptr) int32
	mlx_array_eval                     func(a uintptr) int32
	mlx_array_data_uint8               func(a uintptr) *byte
	mlx_array_tostring                 func(str *uintptr, a uintptr) int32

	mlx_string_new  fnNew
	mlx_string_data func(s uintptr) *byte
	mlx_string_free fnFree

	mlx_vector_array_new          fnNew
	mlx_vector_array_new_data     func(data *uintptr, size uint64) uintptr
	mlx_vector_array_free         fnFree
	mlx_vector_array_append_value func(vec, val uintptr) int32
	mlx_vector_array_size         func(vec uintptr) uint64
	mlx_vector_array_get          func(res *uintptr, vec uintptr, idx uint64) int32

	mlx_vector_string_free fnFree
	mlx_vector_string_size func(vec uintptr) uint64
	mlx_vector_string_get  func(res **byte, vec uintptr, idx uint64) int32

	mlx_map_string_to_array_new           fnNew
	mlx_map_string_to_array_free          fnFree
	mlx_map_string_to_array_insert        func(m uintptr, key string, val uintptr) int32
	mlx_map_string_to_array_iterator_new  func(m uintptr) mapIter
	mlx_map_string_to_array_iterator_free func(it mapIter) int32
	mlx_map_string_to_array_iterator_next func(key **byte, val *uintptr, it mapIter) int32

	mlx_map_string_to_string_new           fnNew
	mlx_map_string_to_string_free          fnFree
	mlx_map_string_to_string_insert        func(m uintptr, key, val string) int32
	mlx_map_string_to_string_iterator_new  func(m uintptr) mapIter
	mlx_map_string_to_string_iterator_free func(it mapIter) int32
	mlx_map_string_to_string_iterator_next func(key, val **byte, it mapIter) int32
)

// ---- errors, version, devices, streams ----
var (
	mlx_set_error_handler func(handler, data, dtor uintptr)
	mlx_version           func(str *uintptr) int32

	mlx_device_new_type       func(typ int32, index int32) uintptr
	mlx_device_free           fnFree
	mlx_device_tostring       func(str *uintptr, dev uintptr) int32
	mlx_device_get_type       func(typ *int32, dev uintptr) int32
	mlx_get_default_device    func(dev *uintptr) int32
	mlx_set_default_device    func(dev uintptr) int32
	mlx_device_is_available   func(avail *bool, dev uintptr) int32
	mlx_device_count          func(count *int32, typ int32) int32
	mlx_device_info_new       fnNew
	mlx_device_info_get       func(info *uintptr, dev uintptr) int32
	mlx_device_info_free      fnFree
	mlx_device_info_get_keys  func(keys *uintptr, info uintptr) int32
	mlx_device_info_is_string func(isString *bool, info uintptr, key string) int32
	mlx_device_info_get_str   func(val **byte, info uintptr, key string) int32
	mlx_device_info_get_size  func(val *uint64, info uintptr, key string) int32

	mlx_stream_new_device        func(dev uintptr) uintptr
	mlx_stream_free              fnFree
	mlx_stream_tostring          func(str *uintptr, s uintptr) int32
	mlx_synchronize              func(s uintptr) int32
	mlx_get_default_stream       func(s *uintptr, dev uintptr) int32
	mlx_set_default_stream       func(s uintptr) int32
	mlx_default_cpu_stream_new   fnNew
	mlx_default_gpu_stream_new   fnNew
	mlx_stream_get_device        func(dev *uintptr, s uintptr) int32
	mlx_stream_get_index         func(idx *int32, s uintptr) int32
	mlx_eval                     func(vec uintptr) int32
	mlx_async_eval               func(vec uintptr) int32
	mlx_clear_cache              fnVoidRC
	mlx_get_active_memory        fnGetSz
	mlx_get_cache_memory         fnGetSz
	mlx_get_peak_memory          fnGetSz
	mlx_get_memory_limit         fnGetSz
	mlx_reset_peak_memory        fnVoidRC
	mlx_set_cache_limit          fnSetSz
	mlx_set_memory_limit         fnSetSz
	mlx_set_wired_limit          fnSetSz
	mlx_load_safetensors         func(arrays, meta *uintptr, file string, s uintptr) int32
	mlx_save_safetensors         func(file string, arrays, meta uintptr) int32
	mlx_closure_new_func_payload func(fun, payload, dtor uintptr) uintptr
	mlx_closure_free             fnFree
	mlx_closure_apply            func(res *uintptr, cls, input uintptr) int32
	mlx_compile                  func(res *uintptr, cls uintptr, shapeless bool) int32
	mlx_enable_compile           fnVoidRC
	mlx_disable_compile          fnVoidRC
)

// ---- operations ----
var (
	mlx_add, mlx_subtract, mlx_multiply, mlx_divide, mlx_power, mlx_maximum,
	mlx_minimum, mlx_remainder, mlx_floor_divide, mlx_equal, mlx_not_equal,
	mlx_less, mlx_less_equal, mlx_greater, mlx_greater_equal, mlx_logical_and,
	mlx_logical_or, mlx_bitwise_and, mlx_bitwise_or, mlx_bitwise_xor,
	mlx_left_shift, mlx_right_shift, mlx_logaddexp, mlx_matmul fnBinary

	mlx_negative, mlx_abs, mlx_sign, mlx_square, mlx_sqrt, mlx_rsqrt,
	mlx_reciprocal, mlx_exp, mlx_log, mlx_log1p, mlx_sin, mlx_cos, mlx_tanh,
	mlx_sigmoid, mlx_erf, mlx_floor, mlx_ceil, mlx_logical_not, mlx_isnan,
	mlx_isinf, mlx_isfinite, mlx_stop_gradient fnUnary

	mlx_round  func(res *uintptr, a uintptr, decimals int32, s uintptr) int32
	mlx_where  func(res *uintptr, cond, x, y, s uintptr) int32
	mlx_astype func(res *uintptr, a uintptr, dtype int32, s uintptr) int32
	mlx_view   func(res *uintptr, a uintptr, dtype int32, s uintptr) int32

	mlx_sum_axes, mlx_mean_axes, mlx_prod_axes, mlx_max_axes, mlx_min_axes,
	mlx_any_axes, mlx_all_axes, mlx_logsumexp_axes fnAxes
	mlx_argmax_axis, mlx_argmin_axis fnAxis

	mlx_softmax_axis      func(res *uintptr, a uintptr, axis int32, precise bool, s uintptr) int32
	mlx_cumsum            func(res *uintptr, a uintptr, axis int32, reverse, inclusive bool, s uintptr) int32
	mlx_sort_axis         func(res *uintptr, a uintptr, axis int32, s uintptr) int32
	mlx_argsort_axis      func(res *uintptr, a uintptr, axis int32, s uintptr) int32
	mlx_argpartition_axis func(res *uintptr, a uintptr, kth, axis int32, s uintptr) int32

	mlx_take_axis       func(res *uintptr, a, indices uintptr, axis int32, s uintptr) int32
	mlx_take_along_axis func(res *uintptr, a, indices uintptr, axis int32, s uintptr) int32
	mlx_put_along_axis  func(res *uintptr, a, indices, values uintptr, axis int32, s uintptr) int32

	mlx_reshape, mlx_transpose_axes, mlx_broadcast_to fnShape

	mlx_slice            func(res *uintptr, a uintptr, start *int32, nStart uint64, stop *int32, nStop uint64, strides *int32, nStrides uint64, s uintptr) int32
	mlx_slice_update     func(res *uintptr, src, update uintptr, start *int32, nStart uint64, stop *int32, nStop uint64, strides *int32, nStrides uint64, s uintptr) int32
	mlx_concatenate_axis func(res *uintptr, arrays uintptr, axis int32, s uintptr) int32
	mlx_contiguous       func(res *uintptr, a uintptr, allowColMajor bool, s uintptr) int32
	mlx_full             func(res *uintptr, shape *int32, n uint64, vals uintptr, dtype int32, s uintptr) int32
	mlx_arange           func(res *uintptr, start, stop, step float64, dtype int32, s uintptr) int32

	mlx_fast_rms_norm                     func(res *uintptr, x, w uintptr, eps float32, s uintptr) int32
	mlx_fast_layer_norm                   func(res *uintptr, x, w, b uintptr, eps float32, s uintptr) int32
	mlx_fast_rope                         func(res *uintptr, x uintptr, dims int32, traditional bool, base optionalFloat, scale float32, offset int32, freqs, s uintptr) int32
	mlx_fast_rope_dynamic                 func(res *uintptr, x uintptr, dims int32, traditional bool, base optionalFloat, scale float32, offset, freqs, s uintptr) int32
	mlx_fast_scaled_dot_product_attention func(res *uintptr, q, k, v uintptr, scale float32, maskMode string, mask, sinks, s uintptr) int32

	mlx_quantize         func(res *uintptr, w uintptr, groupSize, bits optionalInt, mode string, globalScale, s uintptr) int32
	mlx_dequantize       func(res *uintptr, w, scales, biases uintptr, groupSize, bits optionalInt, mode string, globalScale uintptr, dtype optionalDType, s uintptr) int32
	mlx_quantized_matmul func(res *uintptr, x, w, scales, biases uintptr, transpose bool, groupSize, bits optionalInt, mode string, s uintptr) int32
	mlx_gather_qmm       func(res *uintptr, x, w, scales, biases, lhs, rhs uintptr, transpose bool, groupSize, bits optionalInt, mode string, sortedIndices bool, s uintptr) int32

	mlx_random_bits func(res *uintptr, shape *int32, n uint64, width int32, key, s uintptr) int32
	mlx_random_key  func(res *uintptr, seed uint64) int32
)

// binding ties a C symbol to the Go function variable purego fills in.
type binding struct {
	Name     string
	Fn       any  // pointer to a func variable
	Optional bool // a missing symbol leaves the variable nil instead of failing Load
}

// bindings is the one table of bound functions: Load registers every entry
// and tools/bindcheck compares each entry's Go signature (see Signatures)
// with the C prototype of the same name.
var bindings = []binding{
	{Name: "mlx_array_new_data", Fn: &mlx_array_new_data},
	{Name: "mlx_array_new_data_managed_payload", Fn: &mlx_array_new_data_managed_payload},
	{Name: "mlx_array_new", Fn: &mlx_array_new},
	{Name: "mlx_array_free", Fn: &mlx_array_free},
	{Name: "mlx_array_set", Fn: &mlx_array_set},
	{Name: "mlx_array_ndim", Fn: &mlx_array_ndim},
	{Name: "mlx_array_size", Fn: &mlx_array_size},
	{Name: "mlx_array_shape", Fn: &mlx_array_shape},
	{Name: "mlx_array_strides", Fn: &mlx_array_strides},
	{Name: "mlx_array_dtype", Fn: &mlx_array_dtype},
	{Name: "mlx_array_eval", Fn: &mlx_array_eval},
	{Name: "mlx_array_data_uint8", Fn: &mlx_array_data_uint8},
	{Name: "mlx_array_tostring", Fn: &mlx_array_tostring},
	{Name: "mlx_string_new", Fn: &mlx_string_new},
	{Name: "mlx_string_data", Fn: &mlx_string_data},
	{Name: "mlx_string_free", Fn: &mlx_string_free},
	{Name: "mlx_vector_array_new", Fn: &mlx_vector_array_new},
	{Name: "mlx_vector_array_new_data", Fn: &mlx_vector_array_new_data},
	{Name: "mlx_vector_array_free", Fn: &mlx_vector_array_free},
	{Name: "mlx_vector_array_append_value", Fn: &mlx_vector_array_append_value},
	{Name: "mlx_vector_array_size", Fn: &mlx_vector_array_size},
	{Name: "mlx_vector_array_get", Fn: &mlx_vector_array_get},
	{Name: "mlx_vector_string_free", Fn: &mlx_vector_string_free},
	{Name: "mlx_vector_string_size", Fn: &mlx_vector_string_size},
	{Name: "mlx_vector_string_get", Fn: &mlx_vector_string_get},
	{Name: "mlx_map_string_to_array_new", Fn: &mlx_map_string_to_array_new},
	{Name: "mlx_map_string_to_array_free", Fn: &mlx_map_string_to_array_free},
	{Name: "mlx_map_string_to_array_insert", Fn: &mlx_map_string_to_array_insert},
	{Name: "mlx_map_string_to_array_iterator_new", Fn: &mlx_map_string_to_array_iterator_new},
	{Name: "mlx_map_string_to_array_iterator_free", Fn: &mlx_map_string_to_array_iterator_free},
	{Name: "mlx_map_string_to_array_iterator_next", Fn: &mlx_map_string_to_array_iterator_next},
	{Name: "mlx_map_string_to_string_new", Fn: &mlx_map_string_to_string_new},
	{Name: "mlx_map_string_to_string_free", Fn: &mlx_map_string_to_string_free},
	{Name: "mlx_map_string_to_string_insert", Fn: &mlx_map_string_to_string_insert},
	{Name: "mlx_map_string_to_string_iterator_new", Fn: &mlx_map_string_to_string_iterator_new},
	{Name: "mlx_map_string_to_string_iterator_free", Fn: &mlx_map_string_to_string_iterator_free},
	{Name: "mlx_map_string_to_string_iterator_next", Fn: &mlx_map_string_to_string_iterator_next},

	{Name: "mlx_set_error_handler", Fn: &mlx_set_error_handler},
	{Name: "mlx_version", Fn: &mlx_version},
	{Name: "mlx_device_new_type", Fn: &mlx_device_new_type},
	{Name: "mlx_device_free", Fn: &mlx_device_free},
	{Name: "mlx_device_tostring", Fn: &mlx_device_tostring},
	{Name: "mlx_device_get_type", Fn: &mlx_device_get_type},
	{Name: "mlx_get_default_device", Fn: &mlx_get_default_device},
	{Name: "mlx_set_default_device", Fn: &mlx_set_default_device},
	{Name: "mlx_device_is_available", Fn: &mlx_device_is_available},
	{Name: "mlx_device_count", Fn: &mlx_device_count},
	{Name: "mlx_device_info_new", Fn: &mlx_device_info_new, Optional: true},
	{Name: "mlx_device_info_get", Fn: &mlx_device_info_get, Optional: true},
	{Name: "mlx_device_info_free", Fn: &mlx_device_info_free, Optional: true},
	{Name: "mlx_device_info_get_keys", Fn: &mlx_device_info_get_keys, Optional: true},
	{Name: "mlx_device_info_is_string", Fn: &mlx_device_info_is_string, Optional: true},
	{Name: "mlx_device_info_get_string", Fn: &mlx_device_info_get_str, Optional: true},
	{Name: "mlx_device_info_get_size", Fn: &mlx_device_info_get_size, Optional: true},
	{Name: "mlx_stream_new_device", Fn: &mlx_stream_new_device},
	{Name: "mlx_stream_free", Fn: &mlx_stream_free},
	{Name: "mlx_stream_tostring", Fn: &mlx_stream_tostring},
	{Name: "mlx_synchronize", Fn: &mlx_synchronize},
	{Name: "mlx_get_default_stream", Fn: &mlx_get_default_stream},
	{Name: "mlx_set_default_stream", Fn: &mlx_set_default_stream},
	{Name: "mlx_default_cpu_stream_new", Fn: &mlx_default_cpu_stream_new},
	{Name: "mlx_default_gpu_stream_new", Fn: &mlx_default_gpu_stream_new},
	{Name: "mlx_stream_get_device", Fn: &mlx_stream_get_device},
	{Name: "mlx_stream_get_index", Fn: &mlx_stream_get_index},
	{Name: "mlx_eval", Fn: &mlx_eval},
	{Name: "mlx_async_eval", Fn: &mlx_async_eval},
	{Name: "mlx_clear_cache", Fn: &mlx_clear_cache},
	{Name: "mlx_get_active_memory", Fn: &mlx_get_active_memory},
	{Name: "mlx_get_cache_memory", Fn: &mlx_get_cache_memory},
	{Name: "mlx_get_peak_memory", Fn: &mlx_get_peak_memory},
	{Name: "mlx_get_memory_limit", Fn: &mlx_get_memory_limit},
	{Name: "mlx_reset_peak_memory", Fn: &mlx_reset_peak_memory},
	{Name: "mlx_set_cache_limit", Fn: &mlx_set_cache_limit},
	{Name: "mlx_set_memory_limit", Fn: &mlx_set_memory_limit},
	{Name: "mlx_set_wired_limit", Fn: &mlx_set_wired_limit},
	{Name: "mlx_load_safetensors", Fn: &mlx_load_safetensors},
	{Name: "mlx_save_safetensors", Fn: &mlx_save_safetensors},
	{Name: "mlx_closure_new_func_payload", Fn: &mlx_closure_new_func_payload},
	{Name: "mlx_closure_free", Fn: &mlx_closure_free},
	{Name: "mlx_closure_apply", Fn: &mlx_closure_apply},
	{Name: "mlx_compile", Fn: &mlx_compile},
	{Name: "mlx_enable_compile", Fn: &mlx_enable_compile},
	{Name: "mlx_disable_compile", Fn: &mlx_disable_compile},

	{Name: "mlx_add", Fn: &mlx_add},
	{Name: "mlx_subtract", Fn: &mlx_subtract},
	{Name: "mlx_multiply", Fn: &mlx_multiply},
	{Name: "mlx_divide", Fn: &mlx_divide},
	{Name: "mlx_power", Fn: &mlx_power},
	{Name: "mlx_maximum", Fn: &mlx_maximum},
	{Name: "mlx_minimum", Fn: &mlx_minimum},
	{Name: "mlx_remainder", Fn: &mlx_remainder},
	{Name: "mlx_floor_divide", Fn: &mlx_floor_divide},
	{Name: "mlx_equal", Fn: &mlx_equal},
	{Name: "mlx_not_equal", Fn: &mlx_not_equal},
	{Name: "mlx_less", Fn: &mlx_less},
	{Name: "mlx_less_equal", Fn: &mlx_less_equal},
	{Name: "mlx_greater", Fn: &mlx_greater},
	{Name: "mlx_greater_equal", Fn: &mlx_greater_equal},
	{Name: "mlx_logical_and", Fn: &mlx_logical_and},
	{Name: "mlx_logical_or", Fn: &mlx_logical_or},
	{Name: "mlx_bitwise_and", Fn: &mlx_bitwise_and},
	{Name: "mlx_bitwise_or", Fn: &mlx_bitwise_or},
	{Name: "mlx_bitwise_xor", Fn: &mlx_bitwise_xor},
	{Name: "mlx_left_shift", Fn: &mlx_left_shift},
	{Name: "mlx_right_shift", Fn: &mlx_right_shift},
	{Name: "mlx_logaddexp", Fn: &mlx_logaddexp},
	{Name: "mlx_matmul", Fn: &mlx_matmul},
	{Name: "mlx_negative", Fn: &mlx_negative},
	{Name: "mlx_abs", Fn: &mlx_abs},
	{Name: "mlx_sign", Fn: &mlx_sign},
	{Name: "mlx_square", Fn: &mlx_square},
	{Name: "mlx_sqrt", Fn: &mlx_sqrt},
	{Name: "mlx_rsqrt", Fn: &mlx_rsqrt},
	{Name: "mlx_reciprocal", Fn: &mlx_reciprocal},
	{Name: "mlx_exp", Fn: &mlx_exp},
	{Name: "mlx_log", Fn: &mlx_log},
	{Name: "mlx_log1p", Fn: &mlx_log1p},
	{Name: "mlx_sin", Fn: &mlx_sin},
	{Name: "mlx_cos", Fn: &mlx_cos},
	{Name: "mlx_tanh", Fn: &mlx_tanh},
	{Name: "mlx_sigmoid", Fn: &mlx_sigmoid},
	{Name: "mlx_erf", Fn: &mlx_erf},
	{Name: "mlx_floor", Fn: &mlx_floor},
	{Name: "mlx_ceil", Fn: &mlx_ceil},
	{Name: "mlx_logical_not", Fn: &mlx_logical_not},
	{Name: "mlx_isnan", Fn: &mlx_isnan},
	{Name: "mlx_isinf", Fn: &mlx_isinf},
	{Name: "mlx_isfinite", Fn: &mlx_isfinite},
	{Name: "mlx_stop_gradient", Fn: &mlx_stop_gradient},
	{Name: "mlx_round", Fn: &mlx_round},
	{Name: "mlx_where", Fn: &mlx_where},
	{Name: "mlx_astype", Fn: &mlx_astype},
	{Name: "mlx_view", Fn: &mlx_view},
	{Name: "mlx_sum_axes", Fn: &mlx_sum_axes},
	{Name: "mlx_mean_axes", Fn: &mlx_mean_axes},
	{Name: "mlx_prod_axes", Fn: &mlx_prod_axes},
	{Name: "mlx_max_axes", Fn: &mlx_max_axes},
	{Name: "mlx_min_axes", Fn: &mlx_min_axes},
	{Name: "mlx_any_axes", Fn: &mlx_any_axes},
	{Name: "mlx_all_axes", Fn: &mlx_all_axes},
	{Name: "mlx_logsumexp_axes", Fn: &mlx_logsumexp_axes},
	{Name: "mlx_argmax_axis", Fn: &mlx_argmax_axis},
	{Name: "mlx_argmin_axis", Fn: &mlx_argmin_axis},
	{Name: "mlx_softmax_axis", Fn: &mlx_softmax_axis},
	{Name: "mlx_cumsum", Fn: &mlx_cumsum},
	{Name: "mlx_sort_axis", Fn: &mlx_sort_axis},
	{Name: "mlx_argsort_axis", Fn: &mlx_argsort_axis},
	{Name: "mlx_argpartition_axis", Fn: &mlx_argpartition_axis},
	{Name: "mlx_take_axis", Fn: &mlx_take_axis},
	{Name: "mlx_take_along_axis", Fn: &mlx_take_along_axis},
	{Name: "mlx_put_along_axis", Fn: &mlx_put_along_axis},
	{Name: "mlx_reshape", Fn: &mlx_reshape},
	{Name: "mlx_transpose_axes", Fn: &mlx_transpose_axes},
	{Name: "mlx_broadcast_to", Fn: &mlx_broadcast_to},
	{Name: "mlx_slice", Fn: &mlx_slice},
	{Name: "mlx_slice_update", Fn: &mlx_slice_update},
	{Name: "mlx_concatenate_axis", Fn: &mlx_concatenate_axis},
	{Name: "mlx_contiguous", Fn: &mlx_contiguous},
	{Name: "mlx_full", Fn: &mlx_full},
	{Name: "mlx_arange", Fn: &mlx_arange},
	{Name: "mlx_fast_rms_norm", Fn: &mlx_fast_rms_norm},
	{Name: "mlx_fast_layer_norm", Fn: &mlx_fast_layer_norm},
	{Name: "mlx_fast_rope", Fn: &mlx_fast_rope},
	{Name: "mlx_fast_rope_dynamic", Fn: &mlx_fast_rope_dynamic},
	{Name: "mlx_fast_scaled_dot_product_attention", Fn: &mlx_fast_scaled_dot_product_attention},
	{Name: "mlx_quantize", Fn: &mlx_quantize},
	{Name: "mlx_dequantize", Fn: &mlx_dequantize},
	{Name: "mlx_quantized_matmul", Fn: &mlx_quantized_matmul},
	{Name: "mlx_gather_qmm", Fn: &mlx_gather_qmm},
	{Name: "mlx_random_bits", Fn: &mlx_random_bits},
	{Name: "mlx_random_key", Fn: &mlx_random_key},
}

// Signature is the Go-side view of one bound C function: the kinds of its
// arguments and result as purego will marshal them ("uintptr", "int32",
// "*uintptr", "string", "struct{int32,bool}", ...; "" result for void).
type Signature struct {
	Name string
	Args []string
	Ret  string
}

// Signatures lists every bound function's Go signature, derived by
// reflection from the same table Load registers, so a checker compares
// what is actually called rather than a hand-kept copy. It needs no library.
func Signatures() []Signature {
	out := make([]Signature, 0, len(bindings))
	for _, b := range bindings {
		t := reflect.TypeOf(b.Fn).Elem()
		s := Signature{Name: b.Name}
		for i := range t.NumIn() {
			s.Args = append(s.Args, kindOf(t.In(i)))
		}
		if t.NumOut() == 1 {
			s.Ret = kindOf(t.Out(0))
		}
		out = append(out, s)
	}
	return out
}

func kindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + kindOf(t.Elem())
	case reflect.Struct:
		var f []string
		for i := range t.NumField() {
			f = append(f, kindOf(t.Field(i).Type))
		}
		return "struct{" + strings.Join(f, ",") + "}"
	case reflect.Uint8:
		return "uint8"
	}
	if t.Kind() == reflect.Func {
		return fmt.Sprintf("func%d", t.NumIn())
	}
	return t.Kind().String()
}
