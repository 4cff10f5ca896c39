package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi"
)

const header = `
/* a comment with int f(void); inside */
#include <stdbool.h>
typedef struct mlx_array_ { void* ctx; } mlx_array;
typedef struct mlx_optional_int_ { int value; bool has_value; } mlx_optional_int;
typedef enum mlx_dtype_ { MLX_BOOL, MLX_FLOAT32 } mlx_dtype;
typedef void (*handler_fn)(const char* msg, void* data);
#ifdef __cplusplus
extern "C" {
#endif
int mlx_add(mlx_array* res, const mlx_array a, const mlx_array b);
mlx_array mlx_new(const int* shape, int dim, mlx_dtype dtype);
int mlx_q(mlx_array* res, mlx_optional_int bits, const char* mode /* may be null */);
void mlx_handler(handler_fn f, void* data, void (*dtor)(void*));
size_t mlx_size(const mlx_array a);
#ifdef __cplusplus
}
#endif
`

func parseHeader(t *testing.T) (map[string]proto, *typedefs) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.h"), []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	p, td, err := parseDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p, td
}

func TestParse(t *testing.T) {
	p, _ := parseHeader(t)
	if len(p) != 5 {
		t.Fatalf("parsed %d prototypes: %v", len(p), p)
	}
	if got := cSig(p["mlx_handler"]); got != "void mlx_handler(fnptr*, void*, fnptr*)" {
		t.Errorf("mlx_handler parsed as %s", got)
	}
	if got := cSig(p["mlx_new"]); got != "mlx_array mlx_new(int*, int, mlx_dtype)" {
		t.Errorf("mlx_new parsed as %s", got)
	}
}

func TestCheckFindsMismatches(t *testing.T) {
	p, td := parseHeader(t)
	good := []mlxffi.Signature{
		{Name: "mlx_add", Args: []string{"*uintptr", "uintptr", "uintptr"}, Ret: "int32"},
		{Name: "mlx_new", Args: []string{"*int32", "int32", "int32"}, Ret: "uintptr"},
		{Name: "mlx_q", Args: []string{"*uintptr", "struct{int32,bool}", "string"}, Ret: "int32"},
		{Name: "mlx_handler", Args: []string{"uintptr", "uintptr", "uintptr"}},
		{Name: "mlx_size", Args: []string{"uintptr"}, Ret: "uint64"},
	}
	if bad := check(good, p, td); len(bad) != 0 {
		t.Fatalf("correct declarations reported: %v", bad)
	}
	wrong := []mlxffi.Signature{
		{Name: "mlx_add", Args: []string{"*uintptr", "uintptr"}, Ret: "int32"},               // count
		{Name: "mlx_new", Args: []string{"*int64", "int32", "int32"}, Ret: "uintptr"},        // pointee
		{Name: "mlx_q", Args: []string{"*uintptr", "int32", "string"}, Ret: "int32"},         // struct by value
		{Name: "mlx_handler", Args: []string{"uintptr", "uintptr", "uintptr"}, Ret: "int32"}, // void
		{Name: "mlx_size", Args: []string{"uintptr"}, Ret: "int32"},                          // size_t
		{Name: "mlx_gone", Args: nil, Ret: "int32"},                                          // absent
	}
	bad := check(wrong, p, td)
	if len(bad) != len(wrong) {
		t.Fatalf("found %d mismatches, want %d: %v", len(bad), len(wrong), bad)
	}
	for i, m := range bad {
		if m.Name != wrong[i].Name {
			t.Errorf("mismatch %d is %v, want one for %s", i, m, wrong[i].Name)
		}
	}
}

// TestInstalledHeaders checks the real table against an installed mlx-c,
// when there is one.
func TestInstalledHeaders(t *testing.T) {
	dir := "/usr/local/include"
	if _, err := os.Stat(filepath.Join(dir, "mlx", "c", "ops.h")); err != nil {
		t.Skip("mlx-c headers not found in " + dir)
	}
	p, td, err := parseDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range check(mlxffi.Signatures(), p, td) {
		t.Error(m)
	}
}
