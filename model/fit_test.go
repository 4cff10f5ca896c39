package model_test

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// fixtureDirs lists every checkpoint folder under testdata.
func fixtureDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir("testdata", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "config.json" {
			if _, e := os.Stat(filepath.Join(filepath.Dir(p), "model.safetensors")); e == nil {
				dirs = append(dirs, filepath.Dir(p))
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Skip("no fixtures under testdata")
	}
	return dirs
}

// TestPlanMatchesCaches holds the plan's equation to what the caches of
// every fixture hold after 511 prompt tokens and one decode step (512
// tokens: the growing caches' allocation is then exactly two steps), and
// its weight and expert bytes to the files' headers.
func TestPlanMatchesCaches(t *testing.T) {
	const ctx = 512
	for _, dir := range fixtureDirs(t) {
		t.Run(strings.TrimPrefix(dir, "testdata/"), func(t *testing.T) {
			p, err := model.PlanMemory(dir, model.PlanOptions{Context: ctx, Memory: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			set, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var data, experts int64
			for _, f := range set.Files() {
				fi, err := os.Stat(f.Path())
				if err != nil {
					t.Fatal(err)
				}
				data += fi.Size() - f.DataOffset()
				for _, n := range f.Names() {
					if strings.Contains(n, ".experts.") || strings.Contains(n, ".switch_mlp.") || strings.Contains(n, ".switch_glu.") {
						info, _ := f.Info(n)
						experts += info.Size()
					}
				}
			}
			set.Close()
			if p.WeightsBytes != data {
				t.Errorf("weights_bytes %d, the files hold %d data bytes", p.WeightsBytes, data)
			}
			if p.ExpertBytes != experts {
				t.Errorf("expert_bytes %d, the expert tensors hold %d", p.ExpertBytes, experts)
			}
			if _, shared := p.KVByKind[model.KVShared]; shared && len(p.KVByKind) == 1 {
				// a drafter (Gemma 4 assistant) reads its target's caches
				// and cannot run alone
				if p.KVBytes != 0 {
					t.Errorf("a drafter's plan holds %d KV bytes", p.KVBytes)
				}
				t.Skip("every layer reads another model's cache: nothing to hold")
			}
			m, err := model.Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			r := rand.New(rand.NewSource(5))
			ids := make([]int32, ctx-1)
			for i := range ids {
				ids[i] = int32(3 + r.Intn(m.Info().Vocab-3))
			}
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			for _, part := range [][]int32{ids, {7}} {
				sc := tensor.NewScope()
				if _, err := m.Forward(ids2D(part), caches, nil); err != nil {
					sc.Close()
					t.Fatal(err)
				}
				sc.Close()
			}
			var held int64
			for _, c := range caches {
				if c != nil {
					held += int64(c.Bytes())
				}
			}
			if len(p.Layers) != len(caches) {
				t.Fatalf("plan has %d layers, the model %d caches", len(p.Layers), len(caches))
			}
			if p.KVBytes != held {
				t.Errorf("plan kv_bytes %d at %d tokens, the caches hold %d", p.KVBytes, ctx, held)
			}
			if held == 0 {
				t.Error("caches hold nothing")
			}
			t.Logf("weights %d (experts %d), kv/token %d, kv %d, by kind %v", p.WeightsBytes, p.ExpertBytes, p.KVBytesPerToken, p.KVBytes, p.KVByKind)
		})
	}
}

// TestPlanLimits: the largest context and batch are the last that fit by
// the plan's own equation, and memory one byte short of the total does
// not fit.
func TestPlanLimits(t *testing.T) {
	dir := filepath.Join("testdata", "gemma4_moe", "f32")
	p, err := model.PlanMemory(dir, model.PlanOptions{Context: 1000, Batch: 2, Memory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	tight, err := model.PlanMemory(dir, model.PlanOptions{Context: 1000, Batch: 2, Memory: p.TotalBytes})
	if err != nil {
		t.Fatal(err)
	}
	short, err := model.PlanMemory(dir, model.PlanOptions{Context: 1000, Batch: 2, Memory: p.TotalBytes - 1})
	if err != nil {
		t.Fatal(err)
	}
	if !tight.Fits || short.Fits || short.Shrink == "" {
		t.Errorf("fits at the total: %v, one byte short: %v (shrink %q)", tight.Fits, short.Fits, short.Shrink)
	}
	mem := p.FixedBytes() + p.KVBytesAt(3000, 2) + 1
	q, err := model.PlanMemory(dir, model.PlanOptions{Context: 1000, Batch: 2, Memory: mem})
	if err != nil {
		t.Fatal(err)
	}
	n := q.MaxContext
	if n == 0 || q.FixedBytes()+q.KVBytesAt(n, 2) > mem || (n < q.ModelMaxContext || q.ModelMaxContext == 0) && q.FixedBytes()+q.KVBytesAt(n+1, 2) <= mem {
		t.Errorf("max_safe_context %d (model max %d) for %d bytes", n, q.ModelMaxContext, mem)
	}
	b := q.MaxBatch
	if b < 2 || q.FixedBytes()+q.KVBytesAt(1000, b) > mem || q.FixedBytes()+q.KVBytesAt(1000, b+1) <= mem {
		t.Errorf("max_batch %d for %d bytes", b, mem)
	}
	s, err := model.PlanMemory(dir, model.PlanOptions{Context: 1000, Stream: true, ExpertCacheBytes: 1 << 10, Memory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Streamed || s.ResidentWeightsBytes != s.WeightsBytes-s.ExpertBytes || s.ExpertCacheBytes < 1<<10 || s.ExpertCacheBytes > s.ExpertBytes {
		t.Errorf("streamed plan: %+v", s)
	}
}

// TestPlanQuantizedKV holds the plan's quantized per-token bytes to
// 8-bit caches after a run.
func TestPlanQuantizedKV(t *testing.T) {
	dir := writeRandomLlama(t, 0.02) // head_dim 32
	const ctx = 256
	p, err := model.PlanMemory(dir, model.PlanOptions{Context: ctx, KVBits: 8, KVGroup: 32, Memory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	caches := m.MakeCaches()
	for i := range caches {
		caches[i].Free()
		q, err := kv.NewQuantizedKVCache(32, 8)
		if err != nil {
			t.Fatal(err)
		}
		caches[i] = q
	}
	defer model.FreeCaches(caches)
	ids := make([]int32, ctx)
	for i := range ids {
		ids[i] = int32(3 + i%50)
	}
	sc := tensor.NewScope()
	if _, err := m.Forward(ids2D(ids), caches, nil); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	var held int64
	for _, c := range caches {
		held += int64(c.Bytes())
	}
	if held != p.KVBytes {
		t.Errorf("8-bit plan %d bytes, caches hold %d", p.KVBytes, held)
	}
}
