package grammar

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestZZTimeCorpus(t *testing.T) {
	dir := os.Getenv("ZZDIR")
	kind := os.Getenv("ZZKIND")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := strings.Split(string(b), "\n")
		if len(lines) < 3 {
			continue
		}
		s1, _ := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		s2, _ := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[2], "string("), ")"))
		t0 := time.Now()
		done := make(chan string, 1)
		go func() {
			var g *Grammar
			var err error
			switch kind {
			case "regex":
				g, err = RegexGrammar(s1)
			case "ebnf":
				g, err = EBNFGrammar(s1)
			default:
				g, err = JSONSchemaGrammar([]byte(s1), JSONOptions{})
			}
			t1 := time.Since(t0)
			if err == nil && g.NumNodes() <= 20000 {
				exercise(t, g, s2)
			}
			done <- t1.String()
		}()
		select {
		case r := <-done:
			if d := time.Since(t0); d > 200*time.Millisecond {
				t.Logf("SLOW %v (build %s) %s: %q", d, r, filepath.Base(f), s1)
			}
		case <-time.After(10 * time.Second):
			t.Logf("HANG %s: %q", filepath.Base(f), s1)
		}
	}
}
