package safetensors

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func withLength(n uint64, rest string) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint64(out, n)
	return append(out, rest...)
}

// hdrEntry is a tensor header entry for the table below.
func hdrEntry(name, dtype, shape string, b, e int) string {
	return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":[` + itoa(b) + `,` + itoa(e) + `]}`
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// TestCorrupt checks every validation rule: each corrupt file must fail
// with an ErrFormat error that names the problem and, where one is
// concerned, the tensor.
func TestCorrupt(t *testing.T) {
	data8 := make([]byte, 8)
	cases := []struct {
		name   string
		file   []byte
		tensor string // the tensor the message must name, if any
		want   string // what the message must say
	}{
		{"empty file", nil, "", "0 bytes, shorter than the 8-byte header length"},
		{"7 bytes", make([]byte, 7), "", "shorter than the 8-byte"},
		{"length past end", withLength(100, "{}"), "", "header length 100 exceeds the 2 bytes"},
		{"absurd length", withLength(1<<62, "{}"), "", "exceeds the 100000000-byte limit"},
		{"just over limit", withLength(MaxHeaderSize+1, "{}"), "", "limit"},
		{"empty header", rawFile("", nil), "", "invalid JSON header: unexpected end"},
		{"invalid JSON", rawFile(`{"a":`, nil), "", "invalid JSON header"},
		{"garbage", rawFile(`hello`, nil), "", "invalid JSON header"},
		{"array header", rawFile(`[1,2]`, nil), "", "header is an array, not a JSON object"},
		{"string header", rawFile(`"x"`, nil), "", "header is a string, not a JSON object"},
		{"trailing value", rawFile(`{} {}`, nil), "", "an object after the header object"},
		{"trailing garbage", rawFile(`{}x`, nil), "", "invalid JSON header"},
		{"nul padding", rawFile("{}\x00\x00", nil), "", "invalid JSON header"},
		{"invalid UTF-8", rawFile("{\"\xff\":1}", nil), "", "not valid UTF-8"},
		{"entry not object", rawFile(`{"w":[0,4]}`, data8), "w", "entry is an array, want an object"},
		{"entry null", rawFile(`{"w":null}`, data8), "w", "entry is null"},
		{"missing dtype", rawFile(`{"w":{"shape":[2],"data_offsets":[0,8]}}`, data8), "w", `missing field "dtype"`},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,8]}}`, data8), "w", `missing field "shape"`},
		{"missing offsets", rawFile(`{"w":{"dtype":"F32","shape":[2]}}`, data8), "w", `missing field "data_offsets"`},
		{"dtype number", rawFile(`{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, data8), "w", "dtype is a number, want a string"},
		{"shape string", rawFile(`{"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}`, data8), "w", "shape is a string, want an array"},
		{"shape element string", rawFile(`{"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, data8), "w", "shape element is a string"},
		{"shape element array", rawFile(`{"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}}`, data8), "w", "shape element is an array"},
		{"shape fraction", rawFile(`{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, data8), "w", "shape value 2.0 is not an integer"},
		{"shape exponent", rawFile(`{"w":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}`, data8), "w", "not an integer"},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, data8), "w", "shape has negative value -2"},
		{"huge dim", rawFile(`{"w":{"dtype":"F32","shape":[99999999999999999999999],"data_offsets":[0,8]}}`, data8), "w", "too large"},
		{"shape overflow", rawFile(`{"w":{"dtype":"F32","shape":[2097152,2097152,2097152,2097152],"data_offsets":[0,8]}}`, data8), "w", "overflows"},
		{"overflow hidden by a zero", rawFile(`{"w":{"dtype":"F32","shape":[0,2097152,2097152,2097152,2097152],"data_offsets":[0,0]}}`, nil), "w", "overflows"},
		{"bits overflow", rawFile(`{"w":{"dtype":"F64","shape":[1073741824,1073741824],"data_offsets":[0,8]}}`, data8), "w", "overflows"},
		{"offsets object", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":{"a":0}}}`, data8), "w", "data_offsets is an object"},
		{"offsets three", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, data8), "w", "data_offsets has 3 entries, want 2"},
		{"offsets one", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}}`, data8), "w", "data_offsets has 1 entries"},
		{"offset negative", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, data8), "w", "negative"},
		{"offset beyond int64", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}}`, data8), "w", "out of range"},
		{"unknown dtype", rawFile(`{"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}}`, data8), "w", `unknown dtype "F17"`},
		{"lower-case dtype", rawFile(`{"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, data8), "w", `unknown dtype "f32"`},
		{"size mismatch", rawFile(`{`+hdrEntry("w", "F32", "[3]", 0, 8)+`}`, data8), "w", "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8"},
		{"sub-byte", rawFile(`{`+hdrEntry("w", "F4", "[3]", 0, 2)+`}`, data8[:2]), "w", "not a whole number of bytes"},
		{"begin after end", rawFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, data8), "w", "begin 8 > end 0"},
		{"outside data", rawFile(`{`+hdrEntry("w", "F32", "[4]", 0, 16)+`}`, data8), "w", "lie outside the 8-byte data section"},
		{"outside data 2", rawFile(`{`+hdrEntry("a", "F32", "[2]", 0, 8)+`,`+hdrEntry("w", "F32", "[1]", 8, 12)+`}`, data8), "w", "outside"},
		{"overlap", rawFile(`{`+hdrEntry("a", "F32", "[2]", 0, 8)+`,`+hdrEntry("b", "F32", "[1]", 4, 8)+`}`, data8), "b", `overlap tensor "a"`},
		{"same range", rawFile(`{`+hdrEntry("a", "F32", "[2]", 0, 8)+`,`+hdrEntry("b", "U8", "[8]", 0, 8)+`}`, data8), "b", `overlap tensor "a"`},
		{"hole", rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,`+hdrEntry("b", "U8", "[2]", 6, 8)+`}`, data8), "b", "hole of 2 bytes at offset 4"},
		{"hole at start", rawFile(`{`+hdrEntry("b", "F32", "[1]", 4, 8)+`}`, data8), "b", "hole of 4 bytes at offset 0"},
		{"trailing bytes", rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`}`, data8), "", "data section has 8 bytes but the tensors cover only 4"},
		{"data without tensors", rawFile(`{}`, data8), "", "trailing bytes"},
		{"duplicate tensor", rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,`+hdrEntry("a", "F32", "[1]", 4, 8)+`}`, data8), "a", "defined twice in header (duplicate key)"},
		{"duplicate via escape", rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data8), "a", "defined twice"},
		{"bad escape", rawFile(`{"\x":1}`, nil), "", "invalid JSON header: bad escape"},
		{"control char in name", rawFile("{\"a\tb\":1}", nil), "", "control character"},
		{"leading zero", rawFile(`{"a":{"dtype":"U8","shape":[08],"data_offsets":[0,8]}}`, data8), "", "invalid JSON header"},
		{"missing value", rawFile(`{"a":}`, nil), "", "invalid JSON header: unexpected '}', want a value"},
		{"missing shape value", rawFile(`{"a":{"dtype":"U8","shape":,"data_offsets":[0,8]}}`, data8), "", "invalid JSON header"},
		{"trailing comma", rawFile(`{`+hdrEntry("a", "U8", "[8]", 0, 8)+`,}`, data8), "", "invalid JSON header"},
		{"duplicate field", rawFile(`{"a":{"dtype":"F32","dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, data8), "a", `duplicate field "dtype"`},
		{"duplicate shape", rawFile(`{"a":{"dtype":"U8","shape":[8],"shape":[8],"data_offsets":[0,8]}}`, data8), "a", `duplicate field "shape"`},
		{"duplicate offsets", rawFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8],"data_offsets":[0,8]}}`, data8), "a", `duplicate field "data_offsets"`},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), "", `duplicate key "__metadata__"`},
		{"metadata array", rawFile(`{"__metadata__":["a"]}`, nil), "", "__metadata__ is an array, want an object of strings"},
		{"metadata string", rawFile(`{"__metadata__":"x"}`, nil), "", "__metadata__ is a string"},
		{"metadata number value", rawFile(`{"__metadata__":{"total_size":12}}`, nil), "", `__metadata__ value of "total_size" is a number, want a string`},
		{"metadata object value", rawFile(`{"__metadata__":{"k":{}}}`, nil), "", `value of "k" is an object`},
		{"metadata duplicate key", rawFile(`{"__metadata__":{"k":"a","k":"b"}}`, nil), "", `duplicate key "k" in __metadata__`},
		{"bad nesting in unknown field", rawFile(`{"a":{"dtype":"U8","x":[1,{]}}`, nil), "", "invalid JSON header"},
		{"truncated entry", rawFile(`{"a":{"dtype":"U8","shape":[8`, nil), "", "invalid JSON header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse(c.file)
			if err == nil {
				t.Fatalf("accepted; tensors %v", f.Names())
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not say %q", msg, c.want)
			}
			if !strings.HasPrefix(msg, "safetensors: <memory>: ") {
				t.Errorf("error %q does not name the file", msg)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if c.tensor != "" && (!e.HasTensor || e.Tensor != c.tensor || !strings.Contains(msg, `tensor "`+c.tensor+`"`)) {
				t.Errorf("error %q does not name tensor %q", msg, c.tensor)
			}
		})
	}
}

// Things the format allows that a strict reader might wrongly refuse.
func TestLenient(t *testing.T) {
	data8 := make([]byte, 8)
	cases := []struct {
		name string
		file []byte
	}{
		{"no padding", rawFile(`{`+hdrEntry("a", "F32", "[2]", 0, 8)+`}`, data8)},
		{"whitespace around", rawFile(" \n{ \"a\" : {\"shape\":[2], \"dtype\":\"F32\", \"data_offsets\":[0,8]} }\t ", data8)},
		{"offsets out of name order", rawFile(`{`+hdrEntry("a", "F32", "[1]", 4, 8)+`,`+hdrEntry("b", "F32", "[1]", 0, 4)+`}`, data8)},
		{"unknown field", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":{"x":[1,{"y":null}]}}}`, data8)},
		{"null metadata", rawFile(`{"__metadata__":null,`+hdrEntry("a", "F32", "[2]", 0, 8)+`}`, data8)},
		{"empty tensors between", rawFile(`{`+hdrEntry("a", "F32", "[1]", 0, 4)+`,`+hdrEntry("e", "F32", "[0]", 4, 4)+`,`+hdrEntry("e2", "BF16", "[3,0]", 4, 4)+`,`+hdrEntry("b", "F32", "[1]", 4, 8)+`}`, data8)},
		{"large zero-size shape", rawFile(`{`+hdrEntry("a", "F32", "[65536,65536,65536,0]", 0, 0)+`}`, nil)},
		{"escaped dtype", rawFile(`{"a":{"dtype":"F\u0033\u0032","shape":[2],"data_offsets":[0,8]}}`, data8)},
		{"escaped name", rawFile(`{"\u0061\n":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, data8)},
		{"sub-byte whole", rawFile(`{`+hdrEntry("a", "F4", "[4]", 0, 2)+`,`+hdrEntry("b", "F6_E2M3", "[8]", 2, 8)+`}`, data8)},
	}
	for _, c := range cases {
		if _, err := Parse(c.file); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
