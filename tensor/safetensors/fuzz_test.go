package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mlxgo/mlxgo/tensor"
)

// FuzzParse feeds arbitrary bytes to Parse. Whatever the input, Parse must
// not panic, and whatever it accepts must be self-consistent: every byte
// range inside the data, arrays creatable for supported dtypes, and
// re-encoding the tensors must give a file that parses to the same thing.
func FuzzParse(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	var buf bytes.Buffer
	if err := Encode(&buf, sampleTensors(r), map[string]string{"format": "mlx"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	buf.Reset()
	if err := Encode(&buf, []Tensor{{Name: "d", RawDType: "F64", Shape: []int{1}, Data: make([]byte, 8)}, u8("x", 1, 2, 3)}, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	data8 := make([]byte, 8)
	for _, seed := range [][]byte{
		nil,
		rawFile("{}", nil),
		rawFile(`{"__metadata__":{"a":"b"}}`, nil),
		rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,`+hdrEntry("b", "F32", "[1]", 4, 8)+`}`, data8),
		rawFile(`{`+hdrEntry("a", "F32", "[2]", 0, 8)+`,`+hdrEntry("b", "U8", "[8]", 0, 8)+`}`, data8),
		rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,`+hdrEntry("b", "U8", "[2]", 6, 8)+`}`, data8),
		rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}`, data8),
		rawFile(`{"a":{"dtype":"F32","dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, data8),
		rawFile(`{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[2,2]}}`, data8[:2]),
		withLength(1<<62, "{}"),
		withLength(3, "{}"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		checkAgainstStdlib(t, data, file, err)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v (%T) is not a format *Error", err, err)
			}
			return
		}
		checkConsistent(t, file, data)
		// Re-encode what was read; the result must read back identically.
		var ts []Tensor
		for _, name := range file.Names() {
			info, _ := file.Info(name)
			b, _ := file.Bytes(name)
			ts = append(ts, Tensor{Name: name, RawDType: info.RawDType, Shape: info.Shape, Data: b})
		}
		var out bytes.Buffer
		if err := Encode(&out, ts, file.Metadata()); err != nil {
			t.Fatalf("re-encoding an accepted file: %v", err)
		}
		again, err := Parse(out.Bytes())
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if !slices.Equal(again.Names(), file.Names()) {
			t.Fatalf("names %q became %q", file.Names(), again.Names())
		}
		if m1, m2 := file.Metadata(), again.Metadata(); len(m1) != len(m2) || (len(m1) > 0 && !maps.Equal(m1, m2)) {
			t.Fatalf("metadata %v became %v", m1, m2)
		}
		for _, name := range file.Names() {
			i1, _ := file.Info(name)
			i2, _ := again.Info(name)
			b1, _ := file.Bytes(name)
			b2, _ := again.Bytes(name)
			if i1.RawDType != i2.RawDType || i1.DType != i2.DType || !slices.Equal(i1.Shape, i2.Shape) || !bytes.Equal(b1, b2) {
				t.Fatalf("%q: %+v became %+v", name, i1, i2)
			}
		}
	})
}

// FuzzHeader fuzzes the JSON header alone, with a correct length prefix
// and a data section of the given size, so that mutations explore the
// header's semantics instead of mostly breaking the length field.
func FuzzHeader(f *testing.F) {
	f.Add(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, uint16(8))
	f.Add(`{"__metadata__":{"format":"mlx"},"a":{"dtype":"BF16","shape":[2,1],"data_offsets":[4,8]},"b":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}`, uint16(8))
	f.Add(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0,7],"data_offsets":[8,8]}}`, uint16(8))
	f.Add(`{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]},"x":{"extra":[1,{"y":null}],"dtype":"U8","shape":[6],"data_offsets":[2,8]}}`, uint16(8))
	f.Add(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"\u0061":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}}`, uint16(8))
	f.Fuzz(func(t *testing.T, hdr string, dataLen uint16) {
		data := rawFile(hdr, make([]byte, dataLen))
		file, err := Parse(data)
		checkAgainstStdlib(t, data, file, err)
		if err == nil {
			checkConsistent(t, file, data)
		}
	})
}

func checkConsistent(t *testing.T, file *File, data []byte) {
	t.Helper()
	live := tensor.LiveArrays()
	var total int64
	for _, name := range file.Names() {
		info, err := file.Info(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := file.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != info.Size() || file.DataOffset()+info.End > int64(len(data)) || info.Begin < 0 {
			t.Fatalf("%q: range [%d,%d) of %d bytes, data %d", name, info.Begin, info.End, len(b), len(data))
		}
		total += info.Size()
		for _, cp := range []bool{false, true} {
			a, err := file.Array(name, testBE, cp)
			if info.DType == tensor.Invalid {
				if !errors.Is(err, ErrUnsupportedDType) {
					t.Fatalf("%q of %s: Array error %v", name, info.RawDType, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%q: Array: %v", name, err)
			}
			if a.NBytes() != len(b) || !slices.Equal(a.Shape(), info.Shape) {
				t.Fatalf("%q: array %v for %d bytes", name, a, len(b))
			}
			a.Free()
		}
	}
	if total != int64(len(data))-file.DataOffset() {
		t.Fatalf("tensors cover %d of %d data bytes", total, int64(len(data))-file.DataOffset())
	}
	if tensor.LiveArrays() != live {
		t.Fatal("arrays leaked")
	}
}

// manyTensors builds a checkpoint-like file: n tensors with names like a
// transformer's, most of them tiny so that the header dominates.
func manyTensors(n int) []Tensor {
	ts := make([]Tensor, n)
	for i := range ts {
		ts[i] = Tensor{
			Name:  fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", i/64, i%64),
			DType: tensor.BFloat16, Shape: []int{4, 2}, Data: make([]byte, 16),
		}
	}
	return ts
}

func BenchmarkParse10k(b *testing.B) {
	var buf bytes.Buffer
	if err := Encode(&buf, manyTensors(10000), map[string]string{"format": "mlx"}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen10k(b *testing.B) {
	path := filepath.Join(b.TempDir(), "many.safetensors")
	if err := Write(path, manyTensors(10000), nil); err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ResetTimer()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// checkAgainstStdlib uses encoding/json as an oracle for the hand-written
// scanner: a syntax error from Parse means the header is not JSON, an
// accepted header is JSON, and it has the keys Unmarshal sees, without
// duplicates.
func checkAgainstStdlib(t *testing.T, data []byte, file *File, err error) {
	t.Helper()
	if len(data) < 8 {
		return
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize || n > uint64(len(data)-8) {
		return
	}
	hdr := data[8 : 8+n]
	if !utf8.Valid(hdr) {
		if err == nil {
			t.Fatal("accepted a header that is not UTF-8")
		}
		return
	}
	// Parse stops at the first problem, so a header with a type error may
	// be malformed further on: the oracle only binds in these directions.
	valid := json.Valid(hdr)
	syntaxErr := err != nil && strings.Contains(err.Error(), "invalid JSON header")
	if syntaxErr && valid {
		t.Fatalf("json.Valid accepts the header but Parse says %v; header %q", err, hdr)
	}
	if !valid && err == nil {
		t.Fatalf("json.Valid rejects the header but Parse accepts it; header %q", hdr)
	}
	if err != nil {
		return
	}
	var m map[string]json.RawMessage
	if uerr := json.Unmarshal(hdr, &m); uerr != nil {
		t.Fatalf("accepted header that Unmarshal rejects: %v", uerr)
	}
	want := file.Len()
	if _, ok := m[metadataKey]; ok {
		want++
	}
	if len(m) != want {
		t.Fatalf("Unmarshal sees %d keys, Parse %d tensors", len(m), file.Len())
	}
	for _, name := range file.Names() {
		if _, ok := m[name]; !ok {
			t.Fatalf("tensor %q is not a key for Unmarshal", name)
		}
	}
}
