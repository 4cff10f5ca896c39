package generate_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestMLXGreedyParity runs the pipelined loop on the lazy MLX backend:
// greedy output equals HF's on every float32 fixture, from a cold start
// and from a PromptCache, the dispatch order is the pipelined one, and the
// peak memory comes from the backend's own PeakMemory (no Options.Memory).
func TestMLXGreedyParity(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	for _, name := range allFixtures {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(tensortest.NoLeaks(t))
			g := readGolden(t, name)
			m := loadModel(t, filepath.Join(fixtures, name, "f32"), be)
			for _, chunk := range []int{3, 2048} {
				out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: len(g.GreedyF32), PrefillChunkSize: chunk, Backend: be})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, g.GreedyF32) {
					t.Errorf("chunk %d: agrees for %d tokens:\n got %v\nwant %v", chunk, firstDiff(out, g.GreedyF32), out, g.GreedyF32)
				}
				if !st.Pipelined || st.PeakMemory == 0 {
					t.Errorf("stats %+v", st)
				}
			}
			pc := generate.NewPromptCache(1 << 30)
			defer pc.Clear()
			s, err := generate.Generate(t.Context(), m, g.Prompt[:12], &generate.Options{MaxTokens: 1, Backend: be})
			if err != nil {
				t.Fatal(err)
			}
			for range s.Tokens() {
			}
			pc.Put(s.Stats().CacheTokens, s.TakeCaches())
			s.Close()
			caches, n := pc.Take(g.Prompt)
			out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: len(g.GreedyF32), Caches: caches, Backend: be})
			freeAll(caches)
			if err != nil {
				t.Fatal(err)
			}
			if n != 12 || st.CachedTokens != 12 || !slices.Equal(out, g.GreedyF32) {
				t.Errorf("pre-warmed (%d cached): %v, want %v", n, out, g.GreedyF32)
			}
			checkPipelineOrder(t, m, g.Prompt)
		})
	}
}
