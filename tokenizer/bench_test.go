package tokenizer

import (
	"path/filepath"
	"testing"
)

// benchDocs reads the ~1 MB benchmark text (Moby Dick chapters and code).
func benchDocs(b testing.TB) ([]string, int) {
	var docs []string
	readGzJSON(b, filepath.Join("testdata", "bench.json.gz"), &docs)
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	return docs, n
}

// BenchmarkEncode measures single-goroutine encode throughput on ~1 MB of
// prose and code per real tokenizer, the same documents tools/oracle times HF
// tokenizers on. The first pass fills the BPE cache, as HF's does.
func BenchmarkEncode(b *testing.B) {
	docs, size := benchDocs(b)
	for _, name := range realNames {
		b.Run(name, func(b *testing.B) {
			tk := realTokenizer(b, name)
			tokens := 0
			for _, d := range docs {
				tokens += len(tk.Encode(d, false))
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, d := range docs {
					tk.Encode(d, false)
				}
			}
			b.ReportMetric(float64(tokens), "tokens/op")
		})
	}
}
