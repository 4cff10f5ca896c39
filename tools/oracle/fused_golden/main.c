// fused_golden prints, as JSON, MLX's results for the fused layers
// (rms_norm, rope, sdpa with sinks) on fixed inputs, so that mlxgo's CPU
// kernels can be checked against the reference implementation.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlx/c/mlx.h"

static mlx_stream S;

static void check(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "mlx call failed: %s\n", what);
    exit(1);
  }
}

// input returns a float32 array of shape with deterministic values in
// [-amp, amp), cast to dtype.
static mlx_array input(const int* shape, int nd, float amp, uint32_t seed, mlx_dtype dt) {
  size_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  float* v = malloc(n * sizeof *v);
  uint32_t s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    v[i] = ((float)(s >> 8) / (float)(1 << 24) * 2 - 1) * amp;
  }
  mlx_array a = mlx_array_new_data(v, shape, nd, MLX_FLOAT32);
  free(v);
  if (dt != MLX_FLOAT32) {
    mlx_array c = mlx_array_new();
    check(mlx_astype(&c, a, dt, S), "astype");
    mlx_array_free(a);
    a = c;
  }
  return a;
}

// dump prints a as float32 bit patterns, with its shape.
static void dump(const char* name, mlx_array a) {
  mlx_array f = mlx_array_new();
  check(mlx_astype(&f, a, MLX_FLOAT32, S), "astype out");
  check(mlx_array_eval(f), name);
  size_t n = mlx_array_size(f);
  const uint32_t* p = (const uint32_t*)mlx_array_data_float32(f);
  printf("\"%s\": {\"shape\": [", name);
  for (size_t i = 0; i < mlx_array_ndim(f); i++) printf("%s%d", i ? ", " : "", mlx_array_shape(f)[i]);
  printf("], \"bits\": [");
  for (size_t i = 0; i < n; i++) printf("%s%" PRIu32, i ? ", " : "", p[i]);
  printf("]}");
  mlx_array_free(f);
}

static void rope_case(const char* name, mlx_array x, int dims, bool trad, float base,
                      float scale, int offset, mlx_array offarr, mlx_array freqs) {
  mlx_array r = mlx_array_new();
  mlx_optional_float b = {base, freqs.ctx == NULL};
  if (offarr.ctx != NULL) {
    check(mlx_fast_rope_dynamic(&r, x, dims, trad, b, scale, offarr, freqs, S), name);
  } else {
    check(mlx_fast_rope(&r, x, dims, trad, b, scale, offset, freqs, S), name);
  }
  dump(name, r);
  printf(",\n");
  mlx_array_free(r);
}

int main(void) {
  S = mlx_default_cpu_stream_new();
  mlx_array none = {0};
  printf("{\n");

  // rms_norm: x [4, 96] in bf16 and f32, weight [96]
  int xs[] = {4, 96}, ws[] = {96};
  for (int k = 0; k < 2; k++) {
    mlx_dtype dt = k == 0 ? MLX_BFLOAT16 : MLX_FLOAT32;
    const char* sfx = k == 0 ? "bf16" : "f32";
    mlx_array x = input(xs, 2, 3, 1, dt), w = input(ws, 1, 1.5f, 2, dt);
    mlx_array r = mlx_array_new(), r2 = mlx_array_new();
    check(mlx_fast_rms_norm(&r, x, w, 1e-5f, S), "rms_norm");
    check(mlx_fast_rms_norm(&r2, x, none, 1e-5f, S), "rms_norm nil");
    char nm[64];
    snprintf(nm, sizeof nm, "rms_x_%s", sfx), dump(nm, x), printf(",\n");
    snprintf(nm, sizeof nm, "rms_w_%s", sfx), dump(nm, w), printf(",\n");
    snprintf(nm, sizeof nm, "rms_out_%s", sfx), dump(nm, r), printf(",\n");
    snprintf(nm, sizeof nm, "rms_out_nw_%s", sfx), dump(nm, r2), printf(",\n");
    mlx_array_free(x), mlx_array_free(w), mlx_array_free(r), mlx_array_free(r2);
  }

  // rope: x [2, 3, 5, 16]
  int rs[] = {2, 3, 5, 16};
  int fs[] = {6};
  int os[] = {2};
  int offv[] = {7, 40};
  mlx_array freqs = input(fs, 1, 1, 9, MLX_FLOAT32);
  {
    mlx_array a = mlx_array_new(), one = mlx_array_new_float(2.0f);
    check(mlx_add(&a, freqs, one, S), "freqs");  // in [1, 3)
    mlx_array_free(freqs), mlx_array_free(one);
    freqs = a;
  }
  mlx_array offarr = mlx_array_new_data(offv, os, 1, MLX_INT32);
  dump("rope_freqs", freqs), printf(",\n");
  for (int k = 0; k < 2; k++) {
    mlx_dtype dt = k == 0 ? MLX_BFLOAT16 : MLX_FLOAT32;
    mlx_array x = input(rs, 4, 1, 3, dt);
    char nm[64];
    const char* sfx = k == 0 ? "bf16" : "f32";
    snprintf(nm, sizeof nm, "rope_x_%s", sfx), dump(nm, x), printf(",\n");
    snprintf(nm, sizeof nm, "rope_halves_%s", sfx), rope_case(nm, x, 16, false, 10000, 1, 3, none, none);
    snprintf(nm, sizeof nm, "rope_trad_%s", sfx), rope_case(nm, x, 16, true, 10000, 1, 3, none, none);
    snprintf(nm, sizeof nm, "rope_partial_%s", sfx), rope_case(nm, x, 8, false, 500, 0.5f, 100, none, none);
    snprintf(nm, sizeof nm, "rope_partial_trad_%s", sfx), rope_case(nm, x, 8, true, 500, 1, 11, none, none);
    snprintf(nm, sizeof nm, "rope_freqs_%s", sfx), rope_case(nm, x, 12, false, 0, 1, 2, none, freqs);
    snprintf(nm, sizeof nm, "rope_offarr_%s", sfx), rope_case(nm, x, 16, false, 10000, 1, 0, offarr, none);
    mlx_array_free(x);
  }
  mlx_array_free(freqs), mlx_array_free(offarr);

  // sdpa with sinks and a causal mask, gqa: q [1, 4, 3, 16], k/v [1, 2, 20, 16]
  int qs[] = {1, 4, 3, 16}, ks[] = {1, 2, 20, 16}, ss[] = {4};
  mlx_array q = input(qs, 4, 2, 5, MLX_FLOAT32), kk = input(ks, 4, 1, 6, MLX_FLOAT32),
            vv = input(ks, 4, 1, 7, MLX_FLOAT32), sk = input(ss, 1, 3, 8, MLX_FLOAT32);
  mlx_array o = mlx_array_new(), o2 = mlx_array_new();
  check(mlx_fast_scaled_dot_product_attention(&o, q, kk, vv, 0.25f, "causal", none, sk, S), "sdpa");
  check(mlx_fast_scaled_dot_product_attention(&o2, q, kk, vv, 0.25f, "", none, sk, S), "sdpa nomask");
  dump("sdpa_q", q), printf(",\n");
  dump("sdpa_k", kk), printf(",\n");
  dump("sdpa_v", vv), printf(",\n");
  dump("sdpa_sinks", sk), printf(",\n");
  dump("sdpa_causal_sinks", o), printf(",\n");
  dump("sdpa_sinks_nomask", o2), printf("\n}\n");
  mlx_array_free(q), mlx_array_free(kk), mlx_array_free(vv), mlx_array_free(sk);
  mlx_array_free(o), mlx_array_free(o2);
  mlx_stream_free(S);
  return 0;
}
