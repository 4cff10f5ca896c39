package safetensors

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"slices"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// memoryName is the file name errors carry for data given to Parse.
const memoryName = "<memory>"

// File is an opened safetensors file. Its header has been fully validated,
// so every lookup is a map access and every byte range is known to lie in
// the data. A File is safe for concurrent use until Close.
type File struct {
	path    string
	data    []byte // the whole file: a read-only mapping, or caller memory
	unmap   func([]byte) error
	dataOff int64
	infos   []TensorInfo // in header order
	byName  map[string]int
	names   []string // sorted
	meta    map[string]string
	closed  bool
}

// Open maps the file at path read-only and validates its header. Tensor
// data is not read: pages are faulted in when a tensor is used, so opening
// a 100 GB checkpoint costs only its headers.
//
// The mapping stays until Close. Slices from Bytes and arrays borrowed with
// Array(..., false) point into it. Replacing the file by rename (as Write
// does) is safe while it is open; truncating it in place is not (reads of
// the lost pages raise SIGBUS).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Kind: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{File: path, Kind: err}
	}
	if !st.Mode().IsRegular() {
		return nil, formatErr(path, "not a regular file")
	}
	size := st.Size()
	if size < 8 {
		return nil, formatErr(path, "file is %d bytes, shorter than the 8-byte header length", size)
	}
	if int64(int(size)) != size {
		return nil, formatErr(path, "file of %d bytes is too large for this platform", size)
	}
	data, unmap, err := mapFile(f, int(size))
	if err != nil {
		return nil, &Error{File: path, Problem: fmt.Sprintf("mmap: %v", err), Kind: err}
	}
	file, err := parse(path, data)
	if err != nil {
		if unmap != nil {
			_ = unmap(data)
		}
		return nil, err
	}
	file.unmap = unmap
	return file, nil
}

// Parse validates a whole safetensors file held in memory and returns a
// File whose Bytes and borrowed arrays alias data, which must then stay
// unmodified while they are in use.
func Parse(data []byte) (*File, error) { return parse(memoryName, data) }

func parse(path string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, formatErr(path, "file is %d bytes, shorter than the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, formatErr(path, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, formatErr(path, "header length %d exceeds the %d bytes after the length field (truncated file?)", n, len(data)-8)
	}
	h, err := parseHeader(path, data[8:8+n])
	if err != nil {
		return nil, err
	}
	f := &File{
		path:    path,
		data:    data,
		dataOff: 8 + int64(n),
		infos:   h.tensors,
		byName:  h.index,
		names:   make([]string, len(h.tensors)),
		meta:    h.meta,
	}
	dataLen := int64(len(data)) - f.dataOff
	for i, t := range f.infos {
		if t.End > dataLen {
			return nil, tensorErr(path, t.Name, ErrFormat, "data_offsets [%d, %d] lie outside the %d-byte data section (truncated file?)", t.Begin, t.End, dataLen)
		}
		f.names[i] = t.Name
	}
	slices.Sort(f.names)
	if err := checkCoverage(path, f.infos, dataLen); err != nil {
		return nil, err
	}
	return f, nil
}

// checkCoverage requires the tensors to tile the data section exactly, as
// the reference implementation does: an overlap means two tensors share
// bytes (writes through one would corrupt the other, and it is a classic
// trick of crafted files), and holes or trailing bytes mean the header does
// not describe the file it came with.
func checkCoverage(path string, infos []TensorInfo, dataLen int64) error {
	order := make([]int, len(infos))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &infos[a], &infos[b]
		return cmp.Or(cmp.Compare(x.Begin, y.Begin), cmp.Compare(x.End, y.End), cmp.Compare(x.Name, y.Name))
	})
	var pos int64
	prev := -1
	for _, i := range order {
		t := &infos[i]
		switch {
		case t.Begin < pos:
			p := &infos[prev]
			return tensorErr(path, t.Name, ErrFormat, "data_offsets [%d, %d] overlap tensor %q [%d, %d]", t.Begin, t.End, p.Name, p.Begin, p.End)
		case t.Begin > pos:
			return tensorErr(path, t.Name, ErrFormat, "data_offsets [%d, %d] leave a hole of %d bytes at offset %d of the data section", t.Begin, t.End, t.Begin-pos, pos)
		}
		pos = t.End
		prev = i
	}
	if pos != dataLen {
		return formatErr(path, "data section has %d bytes but the tensors cover only %d (trailing bytes)", dataLen, pos)
	}
	return nil
}

// Path returns the file's path ("<memory>" for Parse).
func (f *File) Path() string { return f.path }

// DataOffset returns where the data section starts in the file, for
// readers that fetch tensors with their own I/O (TensorInfo.Begin is
// relative to it).
func (f *File) DataOffset() int64 { return f.dataOff }

// Len returns the number of tensors.
func (f *File) Len() int { return len(f.infos) }

// Names returns the tensor names in sorted order, so that iteration is
// deterministic. The slice is the caller's.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Metadata returns a copy of the header's __metadata__ map (nil when the
// file has none). mlx-community files record {"format": "mlx"} there.
func (f *File) Metadata() map[string]string { return maps.Clone(f.meta) }

func (f *File) lookup(name string) (*TensorInfo, error) {
	if f.closed {
		return nil, tensorErr(f.path, name, ErrClosed, "file is closed")
	}
	i, ok := f.byName[name]
	if !ok {
		return nil, tensorErr(f.path, name, ErrNotFound, "no such tensor")
	}
	return &f.infos[i], nil
}

// Has reports whether the file stores a tensor called name.
func (f *File) Has(name string) bool {
	_, ok := f.byName[name]
	return ok
}

// Info describes the named tensor. It succeeds for tensors of any dtype,
// including ones that cannot become arrays.
func (f *File) Info(name string) (TensorInfo, error) {
	t, err := f.lookup(name)
	if err != nil {
		return TensorInfo{}, err
	}
	info := *t
	info.Shape = slices.Clone(t.Shape)
	return info, nil
}

// Bytes returns the named tensor's raw little-endian data without copying.
// For a file from Open it is a slice of the read-only mapping: writing to
// it faults, and it must not be used after Close.
func (f *File) Bytes(name string) ([]byte, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	b, e := f.dataOff+t.Begin, f.dataOff+t.End
	return f.data[b:e:e], nil
}

// Array returns the named tensor as an array on be (nil: the default
// backend).
//
// With copy false the array borrows the file's memory (tensor.FromBytesOn
// with noCopy): no allocation and no read until the backend touches the
// data. Such arrays must be freed before Close, since Close unmaps what
// they point at. Data not aligned to its element size (possible in files
// from other writers) is copied instead, because backends read elements
// through typed pointers.
//
// With copy true the data is copied into backend memory, which needs no
// care about Close and, on the CPU backend, lands large tensors on huge
// pages, cutting TLB misses when the weights are streamed for every token.
func (f *File) Array(name string, be tensor.Backend, copy bool) (*tensor.Array, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.DType == tensor.Invalid {
		return nil, tensorErr(f.path, name, ErrUnsupportedDType, "unsupported dtype %s for tensor %q (the tensor package has bool, uint8, int32, uint32, int64, float16, bfloat16, float32)", t.RawDType, name)
	}
	b, e := f.dataOff+t.Begin, f.dataOff+t.End
	raw := f.data[b:e:e]
	borrow := !copy && len(raw) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(t.DType.Size()) == 0
	var a *tensor.Array
	err = tensor.Try(func() {
		if be == nil {
			be = tensor.Default()
		}
		a = tensor.FromBytesOn(be, raw, slices.Clone(t.Shape), t.DType, borrow)
	})
	if err != nil {
		return nil, tensorErr(f.path, name, err, "%v", err)
	}
	return a, nil
}

// Close releases the mapping. Arrays borrowed with Array(..., false) and
// slices from Bytes must no longer be in use: free borrowed arrays first.
// Closing twice is harmless.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data, unmap := f.data, f.unmap
	f.data, f.unmap = nil, nil
	if unmap != nil {
		if err := unmap(data); err != nil {
			return &Error{File: f.path, Problem: fmt.Sprintf("munmap: %v", err), Kind: err}
		}
	}
	return nil
}
