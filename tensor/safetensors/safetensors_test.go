package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// rawFile assembles a file from a header and a data section, bypassing the
// writer so that tests can build any corruption.
func rawFile(header string, data []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// allDTypes is every dtype of the tensor package.
var allDTypes = []tensor.DType{tensor.Bool, tensor.Uint8, tensor.Int32, tensor.Uint32, tensor.Int64, tensor.Float16, tensor.BFloat16, tensor.Float32}

func sampleTensors(r *rand.Rand) []Tensor {
	var ts []Tensor
	for i, dt := range allDTypes {
		shape := []int{3, 1 + i%3}
		n := 3 * (1 + i%3) * dt.Size()
		ts = append(ts, Tensor{Name: "w." + dt.String(), DType: dt, Shape: shape, Data: randBytes(r, n)})
	}
	ts = append(ts,
		Tensor{Name: "scalar", DType: tensor.Float32, Shape: []int{}, Data: randBytes(r, 4)},
		Tensor{Name: "empty", DType: tensor.BFloat16, Shape: []int{0, 5}, Data: nil},
		Tensor{Name: "also_empty", DType: tensor.Int64, Shape: []int{4, 0}, Data: []byte{}},
		// an odd number of 2-byte elements, to check alignment of what follows
		Tensor{Name: "a_odd", DType: tensor.Float16, Shape: []int{3}, Data: randBytes(r, 6)},
		Tensor{Name: "z_u8", DType: tensor.Uint8, Shape: []int{5}, Data: randBytes(r, 5)},
		Tensor{Name: "unicode ✓ \"quoted\"\n", DType: tensor.Int32, Shape: []int{1}, Data: randBytes(r, 4)},
	)
	return ts
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ts := sampleTensors(r)
	meta := map[string]string{"format": "mlx", "note": "ünïcode \"and\" quotes"}
	path := filepath.Join(t.TempDir(), "rt.safetensors")
	if err := Write(path, ts, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	if f.DataOffset()%8 != 0 {
		t.Errorf("header not padded to 8: data starts at %d", f.DataOffset())
	}
	var want []string
	for _, tt := range ts {
		want = append(want, tt.Name)
	}
	slices.Sort(want)
	if got := f.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names = %q, want %q", got, want)
	}
	if got := f.Metadata(); !maps.Equal(got, meta) {
		t.Errorf("Metadata = %v, want %v", got, meta)
	}
	live := tensor.LiveArrays()
	for _, tt := range ts {
		info, err := f.Info(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != tt.DType || info.RawDType != DTypeCode(tt.DType) || !slices.Equal(info.Shape, tt.Shape) || info.Name != tt.Name {
			t.Errorf("%q: Info = %+v", tt.Name, info)
		}
		if info.Size() != int64(len(tt.Data)) {
			t.Errorf("%q: Size %d, want %d", tt.Name, info.Size(), len(tt.Data))
		}
		if (f.DataOffset()+info.Begin)%int64(tt.DType.Size()) != 0 {
			t.Errorf("%q: file offset %d not aligned to %d", tt.Name, f.DataOffset()+info.Begin, tt.DType.Size())
		}
		b, err := f.Bytes(tt.Name)
		if err != nil || !bytes.Equal(b, tt.Data) {
			t.Errorf("%q: Bytes = %v, %v; want %v", tt.Name, b, err, tt.Data)
		}
		for _, cp := range []bool{false, true} {
			a, err := f.Array(tt.Name, testBE, cp)
			if err != nil {
				t.Fatalf("%q copy=%v: %v", tt.Name, cp, err)
			}
			if wantBorrow := !cp && len(tt.Data) > 0; borrowed(a) != wantBorrow {
				t.Errorf("%q copy=%v: borrowed=%v", tt.Name, cp, borrowed(a))
			}
			if a.DType() != tt.DType || !slices.Equal(a.Shape(), tt.Shape) || !bytes.Equal(a.Bytes(), tt.Data) {
				t.Errorf("%q copy=%v: array %v, bytes %v, want %v", tt.Name, cp, a, a.Bytes(), tt.Data)
			}
			a.Free()
		}
	}
	if got := tensor.LiveArrays(); got != live {
		t.Errorf("LiveArrays %d after freeing, want %d", got, live)
	}
	// Info must hand out copies: changing one must not change the file.
	info, _ := f.Info("w.float32")
	info.Shape[0] = 99
	if again, _ := f.Info("w.float32"); again.Shape[0] != 3 {
		t.Error("Info shares its shape slice with the File")
	}

	// The same bytes through Encode and Parse.
	var buf bytes.Buffer
	if err := Encode(&buf, ts, meta); err != nil {
		t.Fatal(err)
	}
	disk, _ := os.ReadFile(path)
	if !bytes.Equal(buf.Bytes(), disk) {
		t.Error("Encode and Write produce different bytes")
	}
	// Deterministic: the input order does not matter.
	slices.Reverse(ts)
	var buf2 bytes.Buffer
	if err := Encode(&buf2, ts, meta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
		t.Error("output depends on the order of the input")
	}
}

func TestNoTensors(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 0 || len(f.Names()) != 0 || f.Metadata() != nil {
		t.Errorf("empty file: %d tensors, metadata %v", f.Len(), f.Metadata())
	}
	if !bytes.Equal(buf.Bytes(), rawFile("{}      ", nil)) {
		t.Errorf("empty file encodes as %q", buf.Bytes())
	}
}

// The reference writer's output, as in its documentation, must parse.
func TestReferenceExample(t *testing.T) {
	data := []byte("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Info("test")
	if err != nil || info.DType != tensor.Int32 || !slices.Equal(info.Shape, []int{2, 2}) || info.Begin != 0 || info.End != 16 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if f.DataOffset() != 8+60 {
		t.Errorf("DataOffset = %d", f.DataOffset())
	}
}

func TestUnsupportedDType(t *testing.T) {
	var buf bytes.Buffer
	ts := []Tensor{
		{Name: "double", RawDType: "F64", Shape: []int{2}, Data: make([]byte, 16)},
		{Name: "fp8", RawDType: "F8_E4M3", Shape: []int{3}, Data: []byte{1, 2, 3}},
		{Name: "ok", DType: tensor.Float32, Shape: []int{1}, Data: []byte{0, 0, 128, 63}},
	}
	if err := Encode(&buf, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatalf("a file with F64 and F8 tensors must open: %v", err)
	}
	info, err := f.Info("double")
	if err != nil || info.DType != tensor.Invalid || info.RawDType != "F64" || info.Size() != 16 {
		t.Errorf("Info(double) = %+v, %v", info, err)
	}
	if b, err := f.Bytes("fp8"); err != nil || !bytes.Equal(b, []byte{1, 2, 3}) {
		t.Errorf("Bytes(fp8) = %v, %v", b, err)
	}
	_, err = f.Array("double", testBE, true)
	if !errors.Is(err, ErrUnsupportedDType) || !strings.Contains(err.Error(), `unsupported dtype F64 for tensor "double"`) {
		t.Errorf("Array(double) error = %v", err)
	}
	a, err := f.Array("ok", testBE, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Float32s(); len(got) != 1 || got[0] != 1 {
		t.Errorf("ok = %v", got)
	}
	a.Free()
	// nil asks for the default backend (the CPU one, imported by cpu_test.go).
	d, err := f.Array("ok", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Backend() != tensor.Default() || d.Float32s()[0] != 1 {
		t.Errorf("Array(nil backend) on %s = %v", d.Backend().Name(), d.Float32s())
	}
	d.Free()
}

func TestLookupErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, []Tensor{{Name: "x", DType: tensor.Uint8, Shape: []int{1}, Data: []byte{7}}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Info("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Info(nope) = %v", err)
	}
	if _, err := f.Array("nope", testBE, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("Array(nope) = %v", err)
	}
	if f.Has("nope") || !f.Has("x") {
		t.Error("Has is wrong")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Bytes("x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Bytes after Close = %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	short := filepath.Join(dir, "short.safetensors")
	os.WriteFile(short, []byte{1, 2, 3}, 0o644)
	if _, err := Open(short); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), short) || !strings.Contains(err.Error(), "shorter than") {
		t.Errorf("short file: %v", err)
	}
	// A corrupt file is reported with its path and the tensor concerned.
	bad := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(bad, rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4)), 0o644)
	_, err := Open(bad)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `tensor "w"`) || !strings.Contains(err.Error(), "outside") {
		t.Errorf("truncated file: %v", err)
	}
}

func TestMisalignedBorrowCopies(t *testing.T) {
	// A header of odd length puts the F32 data at an odd address; the
	// borrow must fall back to a copy and still read right.
	hdr := `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	if (8+len(hdr))%4 == 0 {
		hdr += " "
	}
	data := rawFile(hdr, []byte{0, 0, 128, 63, 0, 0, 0, 64})
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.Array("x", testBE, false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	if borrowed(a) {
		t.Error("misaligned data was borrowed")
	}
	if got := a.Float32s(); !slices.Equal(got, []float32{1, 2}) {
		t.Errorf("got %v", got)
	}
}

func TestBorrowAliasesFile(t *testing.T) {
	data := rawFile(`{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}      `, []byte{1, 2, 3, 4})
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	borrowed, _ := f.Array("x", testBE, false)
	copied, _ := f.Array("x", testBE, true)
	defer tensor.Free(borrowed, copied)
	data[len(data)-1] = 9 // visible through the borrow only
	if got := borrowed.Bytes(); got[3] != 9 {
		t.Errorf("borrowed array does not alias the data: %v", got)
	}
	if got := copied.Bytes(); got[3] != 4 {
		t.Errorf("copied array aliases the data: %v", got)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	good := Tensor{Name: "a", DType: tensor.Float32, Shape: []int{1}, Data: make([]byte, 4)}
	if err := Write(path, []Tensor{good}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	cases := []struct {
		name string
		ts   []Tensor
		meta map[string]string
		want string
	}{
		{"duplicate", []Tensor{good, good}, nil, "given twice"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: tensor.Uint8, Shape: []int{0}}}, nil, "reserved"},
		{"short data", []Tensor{{Name: "b", DType: tensor.Float32, Shape: []int{2}, Data: make([]byte, 4)}}, nil, "needs 8"},
		{"negative dim", []Tensor{{Name: "b", DType: tensor.Float32, Shape: []int{-1}}}, nil, "negative"},
		{"unknown raw dtype", []Tensor{{Name: "b", RawDType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, nil, "unknown dtype"},
		{"invalid dtype", []Tensor{{Name: "b", Shape: []int{1}, Data: make([]byte, 1)}}, nil, "unsupported dtype"},
		{"bad utf8 name", []Tensor{{Name: "\xff", DType: tensor.Uint8, Shape: []int{1}, Data: make([]byte, 1)}}, nil, "UTF-8"},
		{"bad utf8 metadata", []Tensor{good}, map[string]string{"k": "\xfe"}, "UTF-8"},
		{"overflow", []Tensor{{Name: "b", DType: tensor.Float32, Shape: []int{math.MaxInt, math.MaxInt}}}, nil, "overflows"},
	}
	for _, c := range cases {
		err := Write(path, c.ts, c.meta)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("a failed Write changed the existing file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("failed writes left files behind: %v", entries)
	}
}

func TestWriteArrays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.safetensors")
	live := tensor.LiveArrays()
	k := tensor.FromBytesOn(testBE, []byte{1, 2, 3, 4, 5, 6, 7, 8}, []int{2, 2}, tensor.BFloat16, false)
	v := tensor.FromBytesOn(testBE, []byte{9, 8, 7, 6}, []int{1}, tensor.Float32, false)
	if err := WriteArrays(path, map[string]*tensor.Array{"k": k, "v": v}, map[string]string{"step": "12"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*tensor.Array{"k": k, "v": v} {
		b, err := f.Array(name, testBE, false)
		if err != nil {
			t.Fatal(err)
		}
		if b.DType() != a.DType() || !slices.Equal(b.Shape(), a.Shape()) || !bytes.Equal(b.Bytes(), a.Bytes()) {
			t.Errorf("%s: read %v %v, wrote %v %v", name, b, b.Bytes(), a, a.Bytes())
		}
		b.Free() // before Close: it borrows the mapping
	}
	if f.Metadata()["step"] != "12" {
		t.Errorf("metadata %v", f.Metadata())
	}
	f.Close()
	v.Free()
	if err := WriteArrays(path, map[string]*tensor.Array{"k": k, "v": v}, nil); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("freed array: %v", err)
	}
	if err := WriteArrays(path, map[string]*tensor.Array{"n": nil}, nil); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("nil array: %v", err)
	}
	k.Free()
	if got := tensor.LiveArrays(); got != live {
		t.Errorf("LiveArrays %d, want %d", got, live)
	}
}

// Write replaces by rename, so a reader holding the old file mapped keeps
// seeing the old contents instead of faulting on a truncated mapping.
func TestRewriteWhileMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	old := []Tensor{{Name: "x", DType: tensor.Uint8, Shape: []int{3}, Data: []byte{1, 2, 3}}}
	if err := Write(path, old, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Write(path, []Tensor{{Name: "y", DType: tensor.Float32, Shape: []int{1}, Data: make([]byte, 4)}}, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := f.Bytes("x"); err != nil || !bytes.Equal(b, []byte{1, 2, 3}) {
		t.Errorf("old mapping reads %v, %v", b, err)
	}
	g, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !slices.Equal(g.Names(), []string{"y"}) {
		t.Errorf("new file has %v", g.Names())
	}
}

func f32le(vals ...float32) []byte {
	out := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

// TestReferenceBytes checks Encode against the output the reference
// implementation's own tests expect from its serializer, so files written
// here are the files it writes.
func TestReferenceBytes(t *testing.T) {
	six := f32le(0, 1, 2, 3, 4, 5)
	cases := []struct {
		name string
		ts   []Tensor
		meta map[string]string
		want []byte
	}{
		{"one f32", []Tensor{{Name: "attn.0", DType: tensor.Float32, Shape: []int{1, 2, 3}, Data: six}}, nil,
			rawFile(`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, six)},
		{"padding", []Tensor{{Name: "attn0", DType: tensor.Float32, Shape: []int{1, 1, 2, 3}, Data: six}}, nil,
			rawFile(`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `, six)},
		{"fp4", []Tensor{{Name: "attn.0", RawDType: "F4", Shape: []int{1, 2}, Data: []byte{0}}}, nil,
			rawFile(`{"attn.0":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}}    `, []byte{0})},
		{"empty", nil, nil, rawFile("{}      ", nil)},
		{"metadata only", nil, map[string]string{"framework": "pt"},
			rawFile(`{"__metadata__":{"framework":"pt"}}     `, nil)},
		{"order", []Tensor{ // by the reference's dtype order, then name
			{Name: "a", DType: tensor.Bool, Shape: []int{1}, Data: []byte{1}},
			{Name: "b", DType: tensor.BFloat16, Shape: []int{1}, Data: []byte{2, 3}},
			{Name: "c", DType: tensor.Int64, Shape: []int{}, Data: make([]byte, 8)},
			{Name: "d", DType: tensor.Float16, Shape: []int{1}, Data: []byte{4, 5}},
		}, nil, rawFile(`{"c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]},`+
			`"d":{"dtype":"F16","shape":[1],"data_offsets":[10,12]},"a":{"dtype":"BOOL","shape":[1],"data_offsets":[12,13]}}     `,
			[]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 4, 5, 1})},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		if err := Encode(&buf, c.ts, c.meta); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(buf.Bytes(), c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, buf.Bytes(), c.want)
		}
		if _, err := Parse(buf.Bytes()); err != nil {
			t.Errorf("%s: own output rejected: %v", c.name, err)
		}
	}
}

// A backend failure while making the array is an error naming the
// tensor, not a panic.
func TestArrayBackendFailure(t *testing.T) {
	f, err := Parse(rawFile(`{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	live := tensor.LiveArrays()
	_, err = f.Array("x", &failBackend{}, true)
	if !errors.Is(err, tensor.ErrBackend) || !strings.Contains(err.Error(), `tensor "x"`) {
		t.Errorf("error = %v", err)
	}
	if tensor.LiveArrays() != live {
		t.Error("failed Array leaked")
	}
}
