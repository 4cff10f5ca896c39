package cpu

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// fusedGolden mirrors tensor/testdata/fused_golden.json, written by
// tools/oracle/fused_golden from MLX v0.31.2 (CPU).
type fusedGolden map[string]struct {
	Shape []int    `json:"shape"`
	Bits  []uint32 `json:"bits"`
}

func loadFusedGolden(t *testing.T) fusedGolden {
	t.Helper()
	raw, err := os.ReadFile("../testdata/fused_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g fusedGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g fusedGolden) vals(t *testing.T, name string) []float32 {
	e, ok := g[name]
	if !ok {
		t.Fatalf("golden %q missing", name)
	}
	out := make([]float32, len(e.Bits))
	for i, b := range e.Bits {
		out[i] = math.Float32frombits(b)
	}
	return out
}

func (g fusedGolden) array(t *testing.T, name string, dt tensor.DType) *tensor.Array {
	return tensor.FromFloat32(g.vals(t, name), g[name].Shape, dt)
}

// compareGolden reports how many values of got equal MLX's exactly and
// fails if fewer than minExact of them do or any differs by more than tol
// relative to the row's scale.
func compareGolden(t *testing.T, name string, got, want []float32, minExact float64, tol float64) {
	t.Helper()
	exact := 0
	var worst float64
	for i := range want {
		if got[i] == want[i] {
			exact++
		}
		worst = max(worst, math.Abs(float64(got[i]-want[i]))/max(1, math.Abs(float64(want[i]))))
	}
	frac := float64(exact) / float64(len(want))
	t.Logf("%s: %d/%d bit-exact, worst diff %.3g", name, exact, len(want), worst)
	if frac < minExact || worst > tol {
		t.Errorf("%s: %.1f%% exact (want ≥ %.1f%%), worst diff %.3g (tol %.3g)", name, 100*frac, 100*minExact, worst, tol)
	}
}

func TestFusedGoldenRMSNorm(t *testing.T) {
	g := loadFusedGolden(t)
	fzNoLeak(t, func() {
		// bf16 must be bit-exact; float32 differs in the last bits because
		// MLX sums x² in its SIMD reduction order
		for _, c := range []struct {
			sfx      string
			dt       tensor.DType
			minExact float64
			tol      float64
		}{{"bf16", tensor.BFloat16, 1, 0}, {"f32", tensor.Float32, 0.2, 1e-6}} {
			x := g.array(t, "rms_x_"+c.sfx, c.dt)
			w := g.array(t, "rms_w_"+c.sfx, c.dt)
			r := tensor.RMSNorm(x, w, 1e-5)
			compareGolden(t, "rms "+c.sfx, r.Float32s(), g.vals(t, "rms_out_"+c.sfx), c.minExact, c.tol)
			r2 := tensor.RMSNorm(x, nil, 1e-5)
			compareGolden(t, "rms no weight "+c.sfx, r2.Float32s(), g.vals(t, "rms_out_nw_"+c.sfx), c.minExact, c.tol)
			tensor.Free(x, w, r, r2)
		}
	})
}

func TestFusedGoldenRoPE(t *testing.T) {
	g := loadFusedGolden(t)
	fzNoLeak(t, func() {
		freqs := g.array(t, "rope_freqs", tensor.Float32)
		off := tensor.FromInt32([]int32{7, 40}, []int{2})
		for _, c := range []struct {
			sfx      string
			dt       tensor.DType
			minExact float64
			tol      float64
		}{{"bf16", tensor.BFloat16, 1, 0}, {"f32", tensor.Float32, 0.5, 1e-5}} {
			x := g.array(t, "rope_x_"+c.sfx, c.dt)
			for name, o := range map[string]tensor.RoPEOptions{
				"halves":       {Dims: 16, Base: 10000, Scale: 1, Offset: 3},
				"trad":         {Dims: 16, Traditional: true, Base: 10000, Scale: 1, Offset: 3},
				"partial":      {Dims: 8, Base: 500, Scale: 0.5, Offset: 100},
				"partial_trad": {Dims: 8, Traditional: true, Base: 500, Scale: 1, Offset: 11},
				"freqs":        {Dims: 12, Freqs: freqs, Scale: 1, Offset: 2},
				"offarr":       {Dims: 16, Base: 10000, Scale: 1, OffsetArr: off},
			} {
				r := tensor.RoPE(x, o)
				compareGolden(t, "rope "+name+" "+c.sfx, r.Float32s(), g.vals(t, "rope_"+name+"_"+c.sfx), c.minExact, c.tol)
				r.Free()
			}
			x.Free()
		}
		tensor.Free(freqs, off)
	})
}

func TestFusedGoldenSDPASinks(t *testing.T) {
	g := loadFusedGolden(t)
	fzNoLeak(t, func() {
		q := g.array(t, "sdpa_q", tensor.Float32)
		k := g.array(t, "sdpa_k", tensor.Float32)
		v := g.array(t, "sdpa_v", tensor.Float32)
		s := g.array(t, "sdpa_sinks", tensor.Float32)
		o := tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{Scale: 0.25, MaskKind: tensor.MaskCausal, Sinks: s})
		compareGolden(t, "sdpa causal sinks", o.Float32s(), g.vals(t, "sdpa_causal_sinks"), 0, 1e-5)
		o2 := tensor.ScaledDotProductAttention(q, k, v, tensor.SDPAOptions{Scale: 0.25, Sinks: s})
		compareGolden(t, "sdpa sinks", o2.Float32s(), g.vals(t, "sdpa_sinks_nomask"), 0, 1e-5)
		tensor.Free(q, k, v, s, o, o2)
	})
}
