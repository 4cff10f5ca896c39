// quant_golden asks MLX (through the mlx-c API, CPU stream) to quantize,
// dequantize and multiply small deterministic matrices, and prints the
// results as JSON so that mlxgo's CPU backend can be checked byte for byte
// against the reference implementation. See run.sh.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlx/c/mlx.h>

#define ROWS 6
#define COLS 256
#define XM 3

static mlx_stream cpu;

static void die(const char* what) {
  fprintf(stderr, "quant_golden: %s failed\n", what);
  exit(1);
}

// rng is a 64-bit LCG with an xorshift output step: deterministic and easy
// to reproduce anywhere.
static uint64_t rng_state;
static float rng_unit(void) { // uniform in [-1, 1)
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  uint64_t z = rng_state ^ (rng_state >> 29);
  uint32_t top = (uint32_t)(z >> 40); // 24 bits
  return (float)top / 8388608.0f - 1.0f;
}

// fill_weight makes ROWS x COLS values for group size gs with special
// groups: a constant group, an all-zero group, a group with large outliers,
// an all-negative group and a negative constant group.
static void fill_weight(float* w, int gs) {
  rng_state = 0x9e3779b97f4a7c15ULL;
  for (int r = 0; r < ROWS; r++) {
    float amp = 0.05f * (float)(r + 1);
    for (int c = 0; c < COLS; c++) w[r * COLS + c] = amp * rng_unit();
  }
  int ng = COLS / gs;
  for (int c = 0; c < gs; c++) w[1 * COLS + c] = 0.37f;               // constant
  for (int c = 0; c < gs; c++) w[1 * COLS + (ng - 1) * gs + c] = 0.0f; // zeros
  w[2 * COLS + 3] = 40.0f;                                              // outliers
  w[2 * COLS + 7] = -55.5f;
  w[2 * COLS + gs - 1] = 12.25f;
  for (int c = 0; c < gs; c++) w[3 * COLS + c] = -0.2f - 0.5f * fabsf(rng_unit());
  for (int c = 0; c < gs; c++) w[4 * COLS + (ng - 1) * gs + c] = -2.5f;
  // a group whose minimum is exactly representable and mid-range ties
  for (int c = 0; c < gs; c++) w[5 * COLS + c] = (float)(c % 16) * 0.125f - 1.0f;
}

static void fill_x(float* x, int n) {
  rng_state = 0x243f6a8885a308d3ULL;
  for (int i = 0; i < n; i++) x[i] = rng_unit();
}

static void put_hex(const char* key, const void* p, size_t n, int comma) {
  const uint8_t* b = p;
  printf("\"%s\":\"", key);
  for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
  printf("\"%s", comma ? "," : "");
}

static void put_array(const char* key, mlx_array a, int comma) {
  mlx_array c = mlx_array_new();
  if (mlx_contiguous(&c, a, false, cpu)) die("contiguous");
  if (mlx_array_eval(c)) die("eval");
  const uint8_t* p = mlx_array_data_uint8(c);
  if (!p) die("data");
  put_hex(key, p, mlx_array_nbytes(c), comma);
  mlx_array_free(c);
}

static const char* dtname(mlx_dtype dt) {
  switch (dt) {
    case MLX_FLOAT32: return "float32";
    case MLX_BFLOAT16: return "bfloat16";
    case MLX_FLOAT16: return "float16";
    default: return "?";
  }
}

static mlx_array make(const float* v, int rows, int cols, mlx_dtype dt) {
  int shape[2] = {rows, cols};
  mlx_array f = mlx_array_new_data(v, shape, 2, MLX_FLOAT32);
  mlx_array out = mlx_array_new();
  if (mlx_astype(&out, f, dt, cpu)) die("astype");
  if (mlx_array_eval(out)) die("eval");
  mlx_array_free(f);
  return out;
}

static void one_case(int bits, int gs, mlx_dtype dt, int first) {
  static float wv[ROWS * COLS], xv[XM * COLS], xv2[XM * ROWS];
  fill_weight(wv, gs);
  fill_x(xv, XM * COLS);
  fill_x(xv2, XM * ROWS);
  mlx_array w = make(wv, ROWS, COLS, dt);
  mlx_array x = make(xv, XM, COLS, dt);
  mlx_array x2 = make(xv2, XM, ROWS, dt);
  mlx_optional_int ogs = {gs, true}, obits = {bits, true};
  mlx_optional_dtype nodt = {MLX_FLOAT32, false};
  mlx_array none = mlx_array_new();

  mlx_vector_array qv = mlx_vector_array_new();
  if (mlx_quantize(&qv, w, ogs, obits, "affine", none, cpu)) die("quantize");
  mlx_array wq = mlx_array_new(), sc = mlx_array_new(), bi = mlx_array_new();
  if (mlx_vector_array_get(&wq, qv, 0) || mlx_vector_array_get(&sc, qv, 1) ||
      mlx_vector_array_get(&bi, qv, 2))
    die("vector get");

  mlx_array dq = mlx_array_new();
  if (mlx_dequantize(&dq, wq, sc, bi, ogs, obits, "affine", none, nodt, cpu))
    die("dequantize");
  mlx_array yt = mlx_array_new(), yn = mlx_array_new();
  if (mlx_quantized_matmul(&yt, x, wq, sc, bi, true, ogs, obits, "affine", cpu))
    die("quantized_matmul t");
  if (mlx_quantized_matmul(&yn, x2, wq, sc, bi, false, ogs, obits, "affine", cpu))
    die("quantized_matmul n");

  printf("%s{\"bits\":%d,\"group_size\":%d,\"dtype\":\"%s\",", first ? "" : ",\n", bits, gs,
         dtname(dt));
  printf("\"rows\":%d,\"cols\":%d,\"x_rows\":%d,", ROWS, COLS, XM);
  put_array("w", w, 1);
  put_array("wq", wq, 1);
  put_array("scales", sc, 1);
  put_array("biases", bi, 1);
  put_array("dequant", dq, 1);
  put_array("x", x, 1);
  put_array("y_t", yt, 1);
  put_array("x_n", x2, 1);
  put_array("y_n", yn, 0);
  printf("}");

  mlx_array_free(w); mlx_array_free(x); mlx_array_free(x2);
  mlx_array_free(wq); mlx_array_free(sc); mlx_array_free(bi);
  mlx_array_free(dq); mlx_array_free(yt); mlx_array_free(yn);
  mlx_array_free(none);
  mlx_vector_array_free(qv);
}

int main(void) {
  cpu = mlx_default_cpu_stream_new();
  int bitsv[] = {2, 3, 4, 5, 6, 8};
  int gsv[] = {32, 64, 128};
  mlx_dtype dts[] = {MLX_FLOAT32, MLX_BFLOAT16};
  int first = 1;
  printf("{\"mlx_version\":\"0.31.2\",\"cases\":[\n");
  for (int d = 0; d < 2; d++)
    for (int b = 0; b < 6; b++)
      for (int g = 0; g < 3; g++) {
        one_case(bitsv[b], gsv[g], dts[d], first);
        first = 0;
      }
  one_case(4, 64, MLX_FLOAT16, 0);
  one_case(3, 32, MLX_FLOAT16, 0);
  printf("\n]}\n");
  mlx_stream_free(cpu);
  return 0;
}
