package safetensors

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"github.com/mlxgo/mlxgo/tensor"
)

// MaxHeaderSize is the largest JSON header accepted, the reference
// implementation's limit: a larger length field is corruption, and
// trusting it would mean allocating or scanning gigabytes.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key of the free-form string map.
const metadataKey = "__metadata__"

// TensorInfo describes one stored tensor without touching its data.
type TensorInfo struct {
	Name string
	// DType is the element type, or tensor.Invalid when RawDType has no
	// tensor equivalent (F64, I8, F8_E4M3, ...): such tensors can be read
	// as bytes but not as arrays.
	DType tensor.DType
	// RawDType is the dtype code as written in the header ("BF16").
	RawDType string
	// Shape is the tensor's shape; empty for a scalar.
	Shape []int
	// Begin and End delimit the tensor's bytes within the data section,
	// exactly as the header's data_offsets; the data section starts at
	// File.DataOffset in the file.
	Begin, End int64
}

// Size returns the tensor's byte length.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// NumElements returns the number of elements (1 for a scalar).
func (t TensorInfo) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// header is the decoded and validated JSON header.
type header struct {
	tensors []TensorInfo   // in header order
	index   map[string]int // name -> position in tensors
	meta    map[string]string
}

func parseHeader(file string, hdr []byte) (*header, error) {
	if !utf8.Valid(hdr) {
		return nil, formatErr(file, "invalid JSON header: not valid UTF-8")
	}
	s := &scanner{file: file, doc: "header", b: hdr}
	if s.peek() != '{' {
		return nil, s.typeErr(formatErr(file, "header is %s, not a JSON object", s.kind()))
	}
	// About 90 header bytes per tensor: sizing for that avoids regrowing
	// the slice and map through a 100k-tensor header.
	guess := len(hdr) / 90
	h := &header{tensors: make([]TensorInfo, 0, guess), index: make(map[string]int, guess)}
	haveMeta := false
	err := s.members(func(key string) error {
		if key == metadataKey {
			if haveMeta {
				return formatErr(file, "duplicate key %q in header", key)
			}
			haveMeta = true
			var err error
			h.meta, err = metadata(s)
			return err
		}
		if _, dup := h.index[key]; dup {
			return tensorErr(file, key, ErrFormat, "defined twice in header (duplicate key)")
		}
		info, err := entry(s, key)
		if err != nil {
			return err
		}
		h.index[key] = len(h.tensors)
		h.tensors = append(h.tensors, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.end("header"); err != nil {
		return nil, err
	}
	return h, nil
}

func metadata(s *scanner) (map[string]string, error) {
	switch s.peek() {
	case 'n':
		return nil, s.literal() // null: an absent map, as serde's Option reads it
	case '{':
	default:
		return nil, s.typeErr(formatErr(s.file, "%s is %s, want an object of strings", metadataKey, s.kind()))
	}
	meta := map[string]string{}
	err := s.members(func(key string) error {
		if _, dup := meta[key]; dup {
			return formatErr(s.file, "duplicate key %q in %s", key, metadataKey)
		}
		if s.peek() != '"' {
			return s.typeErr(formatErr(s.file, "%s value of %q is %s, want a string", metadataKey, key, s.kind()))
		}
		v, err := s.str()
		meta[key] = v
		return err
	})
	return meta, err
}

func entry(s *scanner, name string) (TensorInfo, error) {
	info := TensorInfo{Name: name}
	bad := func(format string, args ...any) error {
		return tensorErr(s.file, name, ErrFormat, format, args...)
	}
	if s.peek() != '{' {
		return info, s.typeErr(bad("entry is %s, want an object with dtype, shape and data_offsets", s.kind()))
	}
	var haveDType, haveShape, haveOffsets bool
	err := s.members(func(field string) error {
		switch field {
		case "dtype":
			if haveDType {
				return bad("duplicate field %q", field)
			}
			haveDType = true
			if s.peek() != '"' {
				return s.typeErr(bad("dtype is %s, want a string", s.kind()))
			}
			raw, escaped, err := s.rawStr()
			if err != nil {
				return err
			}
			if code, ok := dtypeCodes[string(raw)]; ok && !escaped {
				info.RawDType = code // the common case, without allocating
				return nil
			}
			s.i -= len(raw) + 2 // rare: decode the escapes
			info.RawDType, err = s.str()
			return err
		case "shape":
			if haveShape {
				return bad("duplicate field %q", field)
			}
			haveShape = true
			info.Shape = make([]int, 0, 4)
			return uints(s, name, field, func(d uint64) error {
				if d > math.MaxInt {
					return bad("shape dimension %d is too large", d)
				}
				info.Shape = append(info.Shape, int(d))
				return nil
			})
		case "data_offsets":
			if haveOffsets {
				return bad("duplicate field %q", field)
			}
			haveOffsets = true
			var offs [2]uint64
			n := 0
			err := uints(s, name, field, func(v uint64) error {
				if n < 2 {
					offs[n] = v
				}
				n++
				return nil
			})
			if err != nil {
				return err
			}
			if n != 2 {
				return bad("data_offsets has %d entries, want 2 [begin, end]", n)
			}
			if offs[0] > math.MaxInt64 || offs[1] > math.MaxInt64 {
				return bad("data_offsets %v out of range", offs)
			}
			info.Begin, info.End = int64(offs[0]), int64(offs[1])
		default:
			// Unknown fields are ignored, as the reference does, so that
			// future additions to the format do not break old readers.
			return s.skip(1)
		}
		return nil
	})
	if err != nil {
		return TensorInfo{}, err
	}
	switch {
	case !haveDType:
		return info, bad("missing field \"dtype\"")
	case !haveShape:
		return info, bad("missing field \"shape\"")
	case !haveOffsets:
		return info, bad("missing field \"data_offsets\"")
	}
	raw, ok := rawDTypes[info.RawDType]
	if !ok {
		return info, bad("unknown dtype %q", info.RawDType)
	}
	info.DType = raw.dt
	if info.Begin > info.End {
		return info, bad("data_offsets begin %d > end %d", info.Begin, info.End)
	}
	// Element count of the non-zero dims, overflow-checked regardless of
	// the order of the dims; any zero dim makes the tensor empty.
	var elems uint64 = 1
	empty := false
	for _, d := range info.Shape {
		if d == 0 {
			empty = true
			continue
		}
		hi, lo := bits.Mul64(elems, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return info, bad("shape %v overflows", info.Shape)
		}
		elems = lo
	}
	if empty {
		elems = 0
	}
	hi, nbits := bits.Mul64(elems, uint64(raw.bits))
	if hi != 0 {
		return info, bad("shape %v overflows", info.Shape)
	}
	if nbits%8 != 0 {
		return info, bad("shape %v of %s is not a whole number of bytes", info.Shape, info.RawDType)
	}
	if want := nbits / 8; want != uint64(info.End-info.Begin) {
		return info, bad("shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d",
			info.Shape, info.RawDType, want, info.Begin, info.End, info.End-info.Begin)
	}
	return info, nil
}

// uints reads an array of non-negative integers, passing each to f.
func uints(s *scanner, name, field string, f func(uint64) error) error {
	if s.peek() != '[' {
		return s.typeErr(tensorErr(s.file, name, ErrFormat, "%s is %s, want an array of integers", field, s.kind()))
	}
	return s.elements(func() error {
		if c := s.peek(); c != '-' && (c < '0' || c > '9') {
			return s.typeErr(tensorErr(s.file, name, ErrFormat, "%s element is %s, want an integer", field, s.kind()))
		}
		lit, err := s.number()
		if err != nil {
			return err
		}
		if lit[0] == '-' {
			return tensorErr(s.file, name, ErrFormat, "%s has negative value %s", field, lit)
		}
		v, err := strconv.ParseUint(lit, 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return tensorErr(s.file, name, ErrFormat, "%s value %s is too large", field, lit)
			}
			return tensorErr(s.file, name, ErrFormat, "%s value %s is not an integer", field, lit)
		}
		return f(v)
	})
}
