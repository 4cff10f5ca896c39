package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// modelFingerprint identifies a model folder's weights and tokenizer for
// caches that outlive the process (serve's SSD cache): the bytes of its
// JSON files (config, tokenizer, generation config) and, for each weights
// file, its name, size and first and last MiB. Renaming or copying the
// folder keeps it; changing a weight file's contents changes it (a change
// confined to the middle of a large file is not seen: the price of not
// reading gigabytes at start).
func modelFingerprint(dir string) (string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, de := range des {
		if n := de.Name(); !de.IsDir() && (strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".safetensors") || n == "tokenizer.model") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		if err := hashFile(h, filepath.Join(dir, n), n); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// hashFile adds a file's name and size and, for small files all of it,
// for large ones its first and last MiB, to h.
func hashFile(h io.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", name, info.Size())
	const edge = 1 << 20
	if info.Size() <= 2*edge {
		_, err = io.Copy(h, f)
		return err
	}
	if _, err := io.CopyN(h, f, edge); err != nil {
		return err
	}
	if _, err := f.Seek(-edge, io.SeekEnd); err != nil {
		return err
	}
	_, err = io.CopyN(h, f, edge)
	return err
}
