package safetensors

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/mlxgo/mlxgo/tensor"
)

// Tensor is one tensor to write: converters build them from foreign
// checkpoints, the KV cache from its arrays' bytes.
type Tensor struct {
	Name  string
	DType tensor.DType
	// RawDType, when set, is written instead of DType's code; it lets a
	// converter pass through tensors the tensor package cannot represent
	// (F64, I8, F8_E4M3, ...). It must be a code the format defines.
	RawDType string
	Shape    []int
	Data     []byte // little-endian elements, row-major
}

// source is a tensor about to be written; data is produced only when its
// turn comes, so WriteArrays holds one array's bytes at a time.
type source struct {
	name  string
	code  string
	rank  int
	shape []int
	size  int64
	data  func() ([]byte, error)
}

// Write writes tensors and metadata to path as a safetensors file.
//
// The layout is deterministic and the reference implementation's: tensors
// are stored by decreasing element width (in its fixed order of dtypes),
// then by name, so that with the header padded with spaces to a multiple
// of 8 every tensor starts at a multiple of its element size and can be
// borrowed in place when read back; the header lists them in that order,
// offsets increasing. Output is byte-identical to the reference's for the
// same tensors and at most one metadata entry (it orders metadata keys by
// hash, this package by name). The file is
// written to a temporary file in the same directory, synced and renamed
// over path, so a crash leaves either the old file or the new one, never
// half of one, and readers that have the old file mapped keep it intact.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	srcs, err := tensorSources(path, tensors)
	if err != nil {
		return err
	}
	return writeAtomic(path, srcs, metadata)
}

// Encode writes tensors and metadata in safetensors form to w, with the
// same layout as Write but no atomicity: for in-memory files and streams.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	srcs, err := tensorSources(memoryName, tensors)
	if err != nil {
		return err
	}
	return encode(memoryName, w, srcs, metadata)
}

// WriteArrays writes arrays under their map keys, like Write. Each
// array's bytes are fetched (a.Bytes(), which evaluates it) only when it
// is written, so memory holds one extra copy of one array at a time.
func WriteArrays(path string, arrays map[string]*tensor.Array, metadata map[string]string) error {
	srcs := make([]source, 0, len(arrays))
	for name, a := range arrays {
		if a == nil {
			return tensorErr(path, name, ErrFormat, "nil array")
		}
		if a.Freed() {
			return tensorErr(path, name, ErrFormat, "array was freed")
		}
		code := DTypeCode(a.DType())
		if code == "" {
			return tensorErr(path, name, ErrUnsupportedDType, "unsupported dtype %s", a.DType())
		}
		shape := slices.Clone(a.Shape())
		size := int64(a.NBytes())
		srcs = append(srcs, source{name: name, code: code, rank: rawDTypes[code].rank, shape: shape, size: size,
			data: func() (b []byte, err error) {
				err = tensor.Try(func() { b = a.Bytes() })
				return b, err
			}})
	}
	if err := checkSources(path, srcs); err != nil {
		return err
	}
	return writeAtomic(path, srcs, metadata)
}

func tensorSources(path string, tensors []Tensor) ([]source, error) {
	srcs := make([]source, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		code := t.RawDType
		if code == "" {
			code = DTypeCode(t.DType)
			if code == "" {
				return nil, tensorErr(path, t.Name, ErrUnsupportedDType, "unsupported dtype %s", t.DType)
			}
		}
		raw, ok := rawDTypes[code]
		if !ok {
			return nil, tensorErr(path, t.Name, ErrUnsupportedDType, "unknown dtype %q", code)
		}
		size, err := byteSize(t.Shape, raw.bits)
		if err != nil {
			return nil, tensorErr(path, t.Name, ErrFormat, "shape %v of %s: %v", t.Shape, code, err)
		}
		if int64(len(t.Data)) != size {
			return nil, tensorErr(path, t.Name, ErrFormat, "has %d bytes of data, shape %v of %s needs %d", len(t.Data), t.Shape, code, size)
		}
		data := t.Data
		srcs[i] = source{name: t.Name, code: code, rank: raw.rank, shape: t.Shape, size: size,
			data: func() ([]byte, error) { return data, nil }}
	}
	return srcs, checkSources(path, srcs)
}

// byteSize is the overflow-checked byte length of a tensor.
func byteSize(shape []int, nbits int) (int64, error) {
	var elems uint64 = 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension")
		}
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("size overflows")
		}
		elems = lo
	}
	hi, lo := bits.Mul64(elems, uint64(nbits))
	if hi != 0 || lo/8 > math.MaxInt64 {
		return 0, fmt.Errorf("size overflows")
	}
	if lo%8 != 0 {
		return 0, fmt.Errorf("not a whole number of bytes")
	}
	return int64(lo / 8), nil
}

func checkSources(path string, srcs []source) error {
	seen := make(map[string]bool, len(srcs))
	for _, s := range srcs {
		switch {
		case s.name == metadataKey:
			return tensorErr(path, s.name, ErrFormat, "name is reserved for the metadata map")
		case !utf8.ValidString(s.name):
			return tensorErr(path, s.name, ErrFormat, "name is not valid UTF-8")
		case seen[s.name]:
			return tensorErr(path, s.name, ErrFormat, "given twice")
		}
		seen[s.name] = true
	}
	return nil
}

// buildHeader builds the padded JSON header for srcs, which it sorts into
// storage order.
func buildHeader(path string, srcs []source, metadata map[string]string) ([]byte, error) {
	slices.SortFunc(srcs, func(a, b source) int {
		return cmp.Or(cmp.Compare(b.rank, a.rank), cmp.Compare(a.name, b.name))
	})
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := slices.Sorted(maps.Keys(metadata))
		buf.WriteString(`"` + metadataKey + `":{`)
		for i, k := range keys {
			v := metadata[k]
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, formatErr(path, "metadata entry %q is not valid UTF-8", k)
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(&buf, k)
			buf.WriteByte(':')
			writeJSONString(&buf, v)
		}
		buf.WriteByte('}')
		first = false
	}
	var off int64
	for _, s := range srcs {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeJSONString(&buf, s.name)
		buf.WriteString(`:{"dtype":"` + s.code + `","shape":[`)
		for i, d := range s.shape {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.Itoa(d))
		}
		buf.WriteString(`],"data_offsets":[`)
		buf.WriteString(strconv.FormatInt(off, 10))
		buf.WriteByte(',')
		off += s.size
		buf.WriteString(strconv.FormatInt(off, 10))
		buf.WriteString(`]}`)
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	if buf.Len() > MaxHeaderSize {
		return nil, formatErr(path, "header of %d bytes exceeds the %d-byte limit", buf.Len(), MaxHeaderSize)
	}
	return buf.Bytes(), nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

func encode(path string, w io.Writer, srcs []source, metadata map[string]string) error {
	hdr, err := buildHeader(path, srcs, metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	if _, err := w.Write(n[:]); err != nil {
		return &Error{File: path, Kind: err}
	}
	if _, err := w.Write(hdr); err != nil {
		return &Error{File: path, Kind: err}
	}
	for _, s := range srcs {
		data, err := s.data()
		if err != nil {
			return tensorErr(path, s.name, err, "reading data: %v", err)
		}
		if int64(len(data)) != s.size {
			return tensorErr(path, s.name, ErrFormat, "has %d bytes of data, want %d", len(data), s.size)
		}
		if _, err := w.Write(data); err != nil {
			return &Error{File: path, Kind: err}
		}
	}
	return nil
}

func writeAtomic(path string, srcs []source, metadata map[string]string) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return &Error{File: path, Kind: err}
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := encode(path, bw, srcs, metadata); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return &Error{File: path, Kind: err}
	}
	// CreateTemp makes the file private; a checkpoint is ordinary data.
	if err := tmp.Chmod(0o644); err != nil {
		return &Error{File: path, Kind: err}
	}
	if err := tmp.Sync(); err != nil {
		return &Error{File: path, Kind: err}
	}
	if err := tmp.Close(); err != nil {
		return &Error{File: path, Kind: err}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return &Error{File: path, Kind: err}
	}
	// Make the rename itself durable where directories can be synced.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
