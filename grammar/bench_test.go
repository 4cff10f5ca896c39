package grammar

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

var benchSchemas = map[string]string{
	"person":  `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5}},"required":["name","age"]}`,
	"strict":  `{"type":"object","properties":{"city":{"type":"string"},"temp":{"type":"number"},"unit":{"enum":["C","F"]},"ok":{"type":"boolean"}},"required":["city","temp","unit"],"additionalProperties":false}`,
	"nested":  `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"label":{"type":"string","maxLength":20},"price":{"type":"number","minimum":0}},"required":["id","label"],"additionalProperties":false}},"total":{"type":"number"}},"required":["items"],"additionalProperties":false}`,
	"anyjson": `{"type":"object"}`,
}

// BenchmarkCompile measures schema → grammar → token-mask cache on the
// Gemma 3 vocabulary (262,144 tokens), caches computed eagerly, and
// reports each grammar's automaton nodes.
func BenchmarkCompile(b *testing.B) {
	rv := loadReal(b, "gemma3")
	b.Logf("vocabulary trie: %d nodes", len(rv.ti.trie.b))
	for _, name := range []string{"person", "strict", "nested", "anyjson"} {
		b.Run(name, func(b *testing.B) {
			nodes := 0
			for i := 0; i < b.N; i++ {
				g, err := JSONSchemaGrammar([]byte(benchSchemas[name]), JSONOptions{})
				if err != nil {
					b.Fatal(err)
				}
				nodes = g.NumNodes()
				CompileGrammar(g, rv.ti, CompileOptions{})
			}
			b.ReportMetric(float64(nodes), "nodes")
		})
		b.Run(name+"-budget40ms", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				g, err := JSONSchemaGrammar([]byte(benchSchemas[name]), JSONOptions{})
				if err != nil {
					b.Fatal(err)
				}
				CompileGrammar(g, rv.ti, CompileOptions{Budget: 40 * time.Millisecond})
			}
		})
	}
}

// BenchmarkMaskFill reports the per-token mask fill time (p50, p99) over
// random constrained generations with warm caches on the Gemma 3
// vocabulary.
func BenchmarkMaskFill(b *testing.B) {
	rv := loadReal(b, "gemma3")
	for _, name := range []string{"person", "strict", "nested", "anyjson"} {
		b.Run(name, func(b *testing.B) {
			g, err := JSONSchemaGrammar([]byte(benchSchemas[name]), JSONOptions{})
			if err != nil {
				b.Fatal(err)
			}
			cg := CompileGrammar(g, rv.ti, CompileOptions{})
			r := rand.New(rand.NewSource(5))
			mask := make([]int32, rv.ti.BitmaskWords())
			var times []time.Duration
			isStop := func(id int) bool { return rv.ti.isStop(id) }
			b.ResetTimer()
			for n := 0; n < b.N; {
				m := NewMatcher(cg)
				for step := 0; step < 300 && n < b.N; step++ {
					t0 := time.Now()
					m.FillNextTokenBitmask(mask)
					times = append(times, time.Since(t0))
					n++
					if m.IsCompleted() && step > 20 {
						break
					}
					var id int
					if step < 20 {
						id = pickAllowed(r, mask, isStop)
					} else {
						best, bestRem := -1, 1<<30
						for k := 0; k < 8; k++ {
							c := pickAllowed(r, mask, isStop)
							if c < 0 {
								break
							}
							m.AcceptToken(c)
							if rem := m.minRemaining(); rem < bestRem {
								best, bestRem = c, rem
							}
							m.Rollback(1)
						}
						id = best
					}
					if id < 0 || !m.AcceptToken(id) {
						break
					}
				}
			}
			b.StopTimer()
			// Baseline in the same run: clearing the 32 KiB bitmask, the
			// least any mask fill must do.
			var base []time.Duration
			for k := 0; k < 2000; k++ {
				t0 := time.Now()
				clear(mask)
				base = append(base, time.Since(t0))
			}
			sort.Slice(base, func(i, j int) bool { return base[i] < base[j] })
			b.ReportMetric(float64(base[len(base)/2].Nanoseconds())/1e3, "clear-p50-µs")
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
