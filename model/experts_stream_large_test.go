//go:build unix

package model_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// TestExpertStreamingLarge (MLXGO_MOE_LARGE_DIR=<dir>, where the
// checkpoint is written when absent and kept; delete it afterwards): the
// random Qwen3-30B-A3B-shaped 4-bit MoE of BenchmarkExpertStreamingDecode
// at 56 layers ($MLXGO_MOE_LARGE_LAYERS), over 4 GB of routed experts,
// decoded greedily with the experts streamed through a 1 GiB cache
// ($MLXGO_MOE_LARGE_CACHE bytes) and then fully resident. Every step's
// logits must be equal bit for bit, the stream must miss, and the
// process's peak RSS during the streamed run must stay within the plan's
// total, whose weight bytes must equal the files' data bytes and whose KV
// bytes the caches' after the run; tok/s, hit rate and bytes read per
// token are logged.
func TestExpertStreamingLarge(t *testing.T) {
	dir := os.Getenv("MLXGO_MOE_LARGE_DIR")
	if dir == "" {
		t.Skip("set MLXGO_MOE_LARGE_DIR to a folder with ~5 GB free to run the ≥ 4 GB expert streaming test")
	}
	shape := benchMoEShape
	shape.Layers, shape.Packed = 56, true
	if n, err := strconv.Atoi(os.Getenv("MLXGO_MOE_LARGE_LAYERS")); err == nil && n > 0 {
		shape.Layers = n
	}
	cache := int64(1 << 30)
	if n, err := strconv.ParseInt(os.Getenv("MLXGO_MOE_LARGE_CACHE"), 10, 64); err == nil && n > 0 {
		cache = n
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		writeRandomMoE(t, dir, shape)
		t.Logf("wrote %d layers in %v", shape.Layers, time.Since(t0).Round(time.Second))
	}
	plan, err := model.PlanMemory(dir, model.PlanOptions{Context: 64, Stream: true, ExpertCacheBytes: cache, Memory: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("experts %.2f GB of %.2f GB weights; plan: resident weights %d MiB, expert cache %d MiB, total %d MiB",
		float64(plan.ExpertBytes)/1e9, float64(plan.WeightsBytes)/1e9, plan.ResidentWeightsBytes>>20, plan.ExpertCacheBytes>>20, plan.TotalBytes>>20)
	if plan.ExpertBytes < 4e9 || cache*4 > plan.ExpertBytes {
		t.Fatalf("%d expert bytes with a %d-byte cache: want ≥ 4 GB and a cache under a quarter", plan.ExpertBytes, cache)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, f := range set.Files() {
		fi, err := os.Stat(f.Path())
		if err != nil {
			t.Fatal(err)
		}
		data += fi.Size() - f.DataOffset()
	}
	set.Close()
	if plan.WeightsBytes != data {
		t.Errorf("plan weights_bytes %d, the files hold %d data bytes", plan.WeightsBytes, data)
	}
	const prompt, steps = 16, 32
	type run struct {
		logits [][]byte
		ids    []int32
		perTok time.Duration
		stats  model.ExpertStats
		peak   int64
		kv     int64
	}
	decode := func(opts *model.LoadOptions) run {
		debug.FreeOSMemory()
		// reset the peak RSS (VmHWM) to the current RSS
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
		m, err := model.Load(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		caches := m.MakeCaches()
		defer model.FreeCaches(caches)
		var r run
		step := func(ids []int32) int32 {
			sc := tensor.NewScope()
			defer sc.Close()
			h, err := m.Forward(ids2D(ids), caches, nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
			if err != nil {
				t.Fatal(err)
			}
			r.logits = append(r.logits, bytes.Clone(l.Bytes()))
			am := tensor.AsType(tensor.Argmax(l, -1, false), tensor.Int32)
			return int32(binary.LittleEndian.Uint32(am.Bytes()))
		}
		in := make([]int32, prompt)
		for i := range in {
			in[i] = int32(7 + 131*i%shape.Vocab)
		}
		tok := step(in)
		lm := m.(*model.Loaded)
		lm.ResetExpertStats()
		t0 := time.Now()
		for range steps {
			r.ids = append(r.ids, tok)
			// random weights loop on a token: perturb the fed-back id so
			// the routes keep changing (the same for both runs)
			tok = step([]int32{(tok*7919 + int32(len(r.ids))) % int32(shape.Vocab)})
		}
		r.perTok = time.Since(t0) / steps
		r.stats, _ = lm.ExpertStats()
		for _, c := range caches {
			r.kv += int64(c.Bytes())
		}
		r.peak = procStatus("VmHWM:")
		return r
	}
	streamed := decode(&model.LoadOptions{Experts: &model.ExpertStreaming{CacheBytes: cache}})
	resident := decode(nil)
	if len(streamed.logits) != len(resident.logits) {
		t.Fatalf("%d steps streamed, %d resident", len(streamed.logits), len(resident.logits))
	}
	for i := range resident.logits {
		if !bytes.Equal(streamed.logits[i], resident.logits[i]) {
			t.Fatalf("step %d: streamed logits differ from the resident model's", i)
		}
	}
	if want := plan.KVBytesAt(prompt+steps, 1); streamed.kv != want || resident.kv != want {
		t.Errorf("caches hold %d (streamed) and %d (resident) bytes after %d tokens, the plan %d", streamed.kv, resident.kv, prompt+steps, want)
	}
	s := streamed.stats
	if s.Misses == 0 || s.ResidentBytes > cache {
		t.Errorf("streamed stats %+v with a %d-byte cache", s, cache)
	}
	hit := float64(s.Hits) / float64(max(s.Hits+s.Misses, 1))
	t.Logf("streamed (%d MiB cache): %.2f tok/s, hit rate %.3f, %.1f MB read per token, peak expert bytes %d MiB, peak RSS %d MiB (plan total %d MiB)",
		cache>>20, 1/streamed.perTok.Seconds(), hit, float64(s.BytesRead)/steps/1e6, s.PeakResidentBytes>>20, streamed.peak>>20, plan.TotalBytes>>20)
	t.Logf("resident: %.2f tok/s, peak RSS %d MiB; greedy ids %v", 1/resident.perTok.Seconds(), resident.peak>>20, resident.ids[:8])
	if streamed.peak > plan.TotalBytes {
		t.Errorf("streamed peak RSS %d bytes over the plan's %d", streamed.peak, plan.TotalBytes)
	}
}
