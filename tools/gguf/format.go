package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The GGUF container, version 3, as llama.cpp reads it: a little-endian
// header (magic, version, tensor count, key/value count), the key/value
// metadata, one descriptor per tensor (name, dimensions innermost first,
// element type, offset into the data section), padding to the alignment,
// then the data section with every tensor starting on an aligned offset.

const (
	ggufMagic   = 0x46554747 // "GGUF" read as a little-endian uint32
	ggufVersion = 3
	// defaultAlignment is the data alignment when general.alignment is absent.
	defaultAlignment = 32
)

// valueType is the type tag of a metadata value.
type valueType uint32

const (
	typeUint8   valueType = 0
	typeInt8    valueType = 1
	typeUint16  valueType = 2
	typeInt16   valueType = 3
	typeUint32  valueType = 4
	typeInt32   valueType = 5
	typeFloat32 valueType = 6
	typeBool    valueType = 7
	typeString  valueType = 8
	typeArray   valueType = 9
	typeUint64  valueType = 10
	typeInt64   valueType = 11
	typeFloat64 valueType = 12
)

// GGMLType is a tensor element type of ggml.
type GGMLType uint32

// The element types this tool writes (F32, F16) and the ones it can
// describe when reading a file another tool wrote.
const (
	TypeF32  GGMLType = 0
	TypeF16  GGMLType = 1
	TypeQ4_0 GGMLType = 2
	TypeQ4_1 GGMLType = 3
	TypeQ8_0 GGMLType = 8
	TypeBF16 GGMLType = 30
)

// typeLayout is a ggml type's block: elements per block and bytes per block.
var typeLayout = map[GGMLType]struct {
	name          string
	block, nbytes int
}{
	TypeF32:  {"F32", 1, 4},
	TypeF16:  {"F16", 1, 2},
	TypeQ4_0: {"Q4_0", 32, 18}, // f16 scale + 32 4-bit codes
	TypeQ4_1: {"Q4_1", 32, 20}, // f16 scale and min + 32 4-bit codes
	TypeQ8_0: {"Q8_0", 32, 34}, // f16 scale + 32 int8 codes
	TypeBF16: {"BF16", 1, 2},
}

// String names the type as llama.cpp does.
func (t GGMLType) String() string {
	if l, ok := typeLayout[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type%d", uint32(t))
}

// TensorBytes is the size in bytes of n elements of type t, or an error
// when t is unknown or n is not a whole number of its blocks.
func TensorBytes(t GGMLType, n uint64) (uint64, error) {
	l, ok := typeLayout[t]
	if !ok {
		return 0, fmt.Errorf("gguf: element type %d is not one this tool knows", uint32(t))
	}
	if n%uint64(l.block) != 0 {
		return 0, fmt.Errorf("gguf: %d elements are not a whole number of %s blocks of %d", n, l.name, l.block)
	}
	return n / uint64(l.block) * uint64(l.nbytes), nil
}

// KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a slice
// of one of those.
type KV struct {
	Key   string
	Value any
}

// TensorSpec describes one tensor to write. Dims are in ggml's order,
// innermost (contiguous) first: a row-major [rows, cols] matrix has Dims
// {cols, rows}. Write streams exactly TensorBytes(Type, product of Dims)
// bytes of the tensor's data.
type TensorSpec struct {
	Name  string
	Type  GGMLType
	Dims  []uint64
	Write func(w io.Writer) error
}

func elements(dims []uint64) uint64 {
	n := uint64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

func align(off, a uint64) uint64 { return (off + a - 1) / a * a }

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// WriteFile writes a GGUF v3 stream: the metadata, the tensor descriptors,
// then every tensor's data at its aligned offset. It checks that each
// tensor's Write produced exactly its size, so a wrong converter fails
// here instead of in llama.cpp.
func WriteFile(out io.Writer, kvs []KV, tensors []TensorSpec) error {
	bw := bufio.NewWriterSize(out, 1<<20)
	cw := &countingWriter{w: bw}
	e := &encoder{w: cw}
	alignment := uint64(defaultAlignment)
	seenKey := map[string]bool{}
	for _, kv := range kvs {
		if seenKey[kv.Key] {
			return fmt.Errorf("gguf: metadata key %q given twice", kv.Key)
		}
		seenKey[kv.Key] = true
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a%8 != 0 {
				return fmt.Errorf("gguf: general.alignment must be a uint32 multiple of 8, got %v", kv.Value)
			}
			alignment = uint64(a)
		}
	}
	e.u32(ggufMagic)
	e.u32(ggufVersion)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
	}
	sizes := make([]uint64, len(tensors))
	var off uint64
	seenName := map[string]bool{}
	for i, t := range tensors {
		if seenName[t.Name] {
			return fmt.Errorf("gguf: tensor %q given twice", t.Name)
		}
		seenName[t.Name] = true
		if len(t.Dims) == 0 || len(t.Dims) > 4 {
			return fmt.Errorf("gguf: tensor %q has %d dimensions; ggml takes 1 to 4", t.Name, len(t.Dims))
		}
		size, err := TensorBytes(t.Type, elements(t.Dims))
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		sizes[i] = size
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = align(off+size, alignment)
	}
	if e.err != nil {
		return e.err
	}
	if err := pad(cw, alignment); err != nil {
		return err
	}
	for i, t := range tensors {
		start := cw.n
		if err := t.Write(cw); err != nil {
			return fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		if got := cw.n - start; got != sizes[i] {
			return fmt.Errorf("gguf: tensor %q wrote %d bytes, its type and shape need %d", t.Name, got, sizes[i])
		}
		if err := pad(cw, alignment); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func pad(cw *countingWriter, a uint64) error {
	n := align(cw.n, a) - cw.n
	if n == 0 {
		return nil
	}
	_, err := cw.Write(make([]byte, n))
	return err
}

// encoder writes little-endian GGUF primitives, keeping the first error.
type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) put(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}
func (e *encoder) u8(v uint8)   { e.buf[0] = v; e.put(e.buf[:1]) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:], v); e.put(e.buf[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.put(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.put(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.put([]byte(s)) }

func (e *encoder) value(v any) error {
	tag, err := tagOf(v)
	if err != nil {
		return err
	}
	e.u32(uint32(tag))
	if tag != typeArray {
		e.scalar(v)
		return nil
	}
	switch a := v.(type) {
	case []string:
		e.u32(uint32(typeString))
		e.u64(uint64(len(a)))
		for _, s := range a {
			e.str(s)
		}
	case []float32:
		e.u32(uint32(typeFloat32))
		e.u64(uint64(len(a)))
		for _, f := range a {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.u32(uint32(typeInt32))
		e.u64(uint64(len(a)))
		for _, x := range a {
			e.u32(uint32(x))
		}
	case []uint32:
		e.u32(uint32(typeUint32))
		e.u64(uint64(len(a)))
		for _, x := range a {
			e.u32(x)
		}
	default:
		return fmt.Errorf("array of %T is not supported", v)
	}
	return nil
}

func tagOf(v any) (valueType, error) {
	switch v.(type) {
	case uint8:
		return typeUint8, nil
	case int8:
		return typeInt8, nil
	case uint16:
		return typeUint16, nil
	case int16:
		return typeInt16, nil
	case uint32:
		return typeUint32, nil
	case int32:
		return typeInt32, nil
	case float32:
		return typeFloat32, nil
	case bool:
		return typeBool, nil
	case string:
		return typeString, nil
	case uint64:
		return typeUint64, nil
	case int64:
		return typeInt64, nil
	case float64:
		return typeFloat64, nil
	case []string, []float32, []int32, []uint32:
		return typeArray, nil
	}
	return 0, fmt.Errorf("value of type %T is not a GGUF type", v)
}

func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}

// TensorInfo is a tensor descriptor read back from a GGUF file.
type TensorInfo struct {
	Name   string
	Type   GGMLType
	Dims   []uint64 // innermost first
	Offset uint64   // from the start of the data section
	Size   uint64   // bytes, from the type and dims
}

// File is a parsed GGUF header.
type File struct {
	Version    uint32
	KV         map[string]any
	Keys       []string // in file order
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // where the data section starts in the file
}

// ErrFormat marks input that is not a well-formed GGUF file.
var ErrFormat = errors.New("gguf: malformed file")

// Limits on counts read from a file, so a corrupt header is an error and
// not an attempt to allocate terabytes.
const (
	maxCount     = 1 << 24
	maxStringLen = 1 << 20
)

// decoder reads little-endian GGUF primitives, keeping the first error.
type decoder struct {
	r   io.Reader
	off uint64
	err error
	buf [8]byte
}

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return d.buf[:n]
	}
	if _, err := io.ReadFull(d.r, d.buf[:n]); err != nil {
		d.err = fmt.Errorf("%w: truncated at byte %d", ErrFormat, d.off)
	}
	d.off += uint64(n)
	return d.buf[:n]
}
func (d *decoder) u8() uint8   { return d.read(1)[0] }
func (d *decoder) u16() uint16 { return binary.LittleEndian.Uint16(d.read(2)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.read(4)) }
func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.read(8)) }

func (d *decoder) str() string {
	n := d.u64()
	if d.err != nil {
		return ""
	}
	if n > maxStringLen {
		d.err = fmt.Errorf("%w: string of %d bytes at byte %d", ErrFormat, n, d.off)
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.err = fmt.Errorf("%w: truncated string at byte %d", ErrFormat, d.off)
	}
	d.off += n
	return string(b)
}

func (d *decoder) value(tag valueType, depth int) any {
	switch tag {
	case typeUint8:
		return d.u8()
	case typeInt8:
		return int8(d.u8())
	case typeUint16:
		return d.u16()
	case typeInt16:
		return int16(d.u16())
	case typeUint32:
		return d.u32()
	case typeInt32:
		return int32(d.u32())
	case typeFloat32:
		return math.Float32frombits(d.u32())
	case typeBool:
		return d.u8() != 0
	case typeString:
		return d.str()
	case typeUint64:
		return d.u64()
	case typeInt64:
		return int64(d.u64())
	case typeFloat64:
		return math.Float64frombits(d.u64())
	case typeArray:
		if depth > 0 {
			d.fail("nested arrays are not supported")
			return nil
		}
		et := valueType(d.u32())
		n := d.u64()
		if d.err != nil {
			return nil
		}
		if n > maxCount {
			d.fail(fmt.Sprintf("array of %d elements", n))
			return nil
		}
		out := make([]any, 0, min(n, 1<<16))
		for i := uint64(0); i < n && d.err == nil; i++ {
			out = append(out, d.value(et, depth+1))
		}
		return out
	}
	d.fail(fmt.Sprintf("unknown value type %d", tag))
	return nil
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", ErrFormat, msg, d.off)
	}
}

// ReadHeader parses a GGUF file's header (metadata and tensor descriptors)
// and checks that every tensor lies inside a file of size fileSize.
func ReadHeader(r io.Reader, fileSize int64) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 1<<16)}
	if m := d.u32(); d.err == nil && m != ggufMagic {
		return nil, fmt.Errorf("%w: magic %#x, want GGUF", ErrFormat, m)
	}
	f := &File{Version: d.u32(), KV: map[string]any{}, Alignment: defaultAlignment}
	if d.err == nil && (f.Version < 2 || f.Version > 3) {
		return nil, fmt.Errorf("%w: version %d (this tool reads 2 and 3)", ErrFormat, f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > maxCount || nkv > maxCount) {
		return nil, fmt.Errorf("%w: %d tensors and %d keys", ErrFormat, nt, nkv)
	}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		k := d.str()
		v := d.value(valueType(d.u32()), 0)
		if _, dup := f.KV[k]; dup && d.err == nil {
			d.fail(fmt.Sprintf("key %q twice", k))
		}
		f.KV[k] = v
		f.Keys = append(f.Keys, k)
	}
	if a, ok := f.KV["general.alignment"]; ok {
		a32, ok := a.(uint32)
		if !ok || a32 == 0 || a32%8 != 0 {
			return nil, fmt.Errorf("%w: general.alignment %v", ErrFormat, a)
		}
		f.Alignment = uint64(a32)
	}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		t := TensorInfo{Name: d.str()}
		nd := d.u32()
		if nd == 0 || nd > 4 {
			d.fail(fmt.Sprintf("tensor %q has %d dimensions", t.Name, nd))
			break
		}
		for range nd {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type = GGMLType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			break
		}
		size, err := TensorBytes(t.Type, elements(t.Dims))
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, t.Name, err)
		}
		t.Size = size
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q at unaligned offset %d", ErrFormat, t.Name, t.Offset)
		}
		f.Tensors = append(f.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	f.DataOffset = align(d.off, f.Alignment)
	for _, t := range f.Tensors {
		if end := f.DataOffset + t.Offset + t.Size; end > uint64(fileSize) {
			return nil, fmt.Errorf("%w: tensor %q ends at byte %d of a %d-byte file", ErrFormat, t.Name, end, fileSize)
		}
	}
	return f, nil
}
