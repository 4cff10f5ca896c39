// random_golden prints, as JSON, MLX's random streams (bits, split,
// uniform, categorical) for a few seeds, so that mlxgo's CPU generator can
// be checked bit for bit against the reference implementation.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/c/mlx.h"

static mlx_stream S;

static void check(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "mlx call failed: %s\n", what);
    exit(1);
  }
}

// dump_u32 prints the elements of a uint32 (or int32/float32 as raw bits) array.
static void dump_words(const char* name, mlx_array a) {
  check(mlx_array_eval(a), name);
  size_t n = mlx_array_size(a);
  const uint32_t* p;
  switch (mlx_array_dtype(a)) {
    case MLX_FLOAT32:
      p = (const uint32_t*)mlx_array_data_float32(a);
      break;
    case MLX_INT32:
      p = (const uint32_t*)mlx_array_data_int32(a);
      break;
    default:
      p = mlx_array_data_uint32(a);
  }
  printf("\"%s\": [", name);
  for (size_t i = 0; i < n; i++) printf("%s%" PRIu32, i ? ", " : "", p[i]);
  printf("]");
}

static void bits_case(mlx_array key, const char* name, const int* shape, size_t nd) {
  mlx_array r = mlx_array_new();
  check(mlx_random_bits(&r, shape, nd, 4, key, S), "bits");
  dump_words(name, r);
  printf(",\n");
  mlx_array_free(r);
}

int main(void) {
  S = mlx_default_cpu_stream_new();
  const uint64_t seeds[] = {0, 1, 42, 1234567890123ULL, 0xfffffffffffffffULL};
  const int nseeds = sizeof seeds / sizeof seeds[0];
  // fixed logits [4, 10]
  float logits[40];
  for (int i = 0; i < 40; i++) logits[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  int lshape[2] = {4, 10};
  mlx_array lg = mlx_array_new_data(logits, lshape, 2, MLX_FLOAT32);

  printf("{\n\"logits_shape\": [4, 10],\n");
  dump_words("logits", lg);
  printf(",\n\"cases\": [\n");
  for (int c = 0; c < nseeds; c++) {
    mlx_array key = mlx_array_new();
    check(mlx_random_key(&key, seeds[c]), "key");
    printf("{\"seed\": %" PRIu64 ",\n", seeds[c]);
    dump_words("key", key);
    printf(",\n");
    int s2[] = {2}, s3[] = {3}, s57[] = {5, 7}, s22[] = {2, 2}, s1[] = {1}, s0[] = {0};
    bits_case(key, "bits_2", s2, 1);
    bits_case(key, "bits_3", s3, 1);
    bits_case(key, "bits_5x7", s57, 2);
    bits_case(key, "bits_2x2", s22, 2);
    bits_case(key, "bits_1", s1, 1);
    (void)s0;

    mlx_array sp = mlx_array_new();
    check(mlx_random_split_num(&sp, key, 3, S), "split_num");
    dump_words("split_3", sp);
    printf(",\n");
    mlx_array a = mlx_array_new(), b = mlx_array_new();
    check(mlx_random_split(&a, &b, key, S), "split");
    dump_words("split_a", a);
    printf(",\n");
    dump_words("split_b", b);
    printf(",\n");

    mlx_array lo = mlx_array_new_float(0.0f), hi = mlx_array_new_float(1.0f);
    mlx_array u = mlx_array_new();
    int s10[] = {10};
    check(mlx_random_uniform(&u, lo, hi, s10, 1, MLX_FLOAT32, key, S), "uniform");
    dump_words("uniform_f32_bits", u);
    printf(",\n");

    mlx_array cat = mlx_array_new();
    check(mlx_random_categorical(&cat, lg, -1, key, S), "categorical");
    dump_words("categorical", cat);
    printf("}%s\n", c + 1 < nseeds ? "," : "");

    mlx_array_free(cat);
    mlx_array_free(u);
    mlx_array_free(lo);
    mlx_array_free(hi);
    mlx_array_free(a);
    mlx_array_free(b);
    mlx_array_free(sp);
    mlx_array_free(key);
  }
  printf("]}\n");
  mlx_array_free(lg);
  mlx_stream_free(S);
  return 0;
}
