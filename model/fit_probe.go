package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// DecodeKernel is one kind of matrix a decode step multiplies a token by,
// read off the checkpoint's headers: a plain or affine-quantized
// projection, or a stacked expert bank of which TopK are gathered per
// token.
type DecodeKernel struct {
	// Bits and Group describe an affine-quantized weight (0: plain).
	Bits  int `json:"bits,omitempty"`
	Group int `json:"group,omitempty"`
	// DType is the plain weight's dtype, or a quantized one's scales'.
	DType tensor.DType `json:"-"`
	// Out and In are the matrix's rows and columns (one expert's, for a
	// bank).
	Out int `json:"out"`
	In  int `json:"in"`
	// Experts, when not 0, is a stacked bank's expert count, of which
	// TopK are gathered per token (per-expert tensors: Experts 0, TopK
	// the routes).
	Experts int `json:"experts,omitempty"`
	TopK    int `json:"top_k,omitempty"`
	// Routed marks routed experts (a bank, or per-expert tensors).
	Routed bool `json:"routed,omitempty"`
	// PerExpert is the bank's expert count when its experts are stored
	// one per tensor.
	PerExpert int `json:"per_expert,omitempty"`
	// Calls is how many such multiplies one decode step makes (a fraction
	// for per-expert tensors: top-k of the bank's experts run).
	Calls float64 `json:"calls"`
	// Bytes is what one call reads (a bank: its TopK experts').
	Bytes int64 `json:"bytes"`
}

// Key names the kernel's format and shape ("q4g64:bf16 2048x8192",
// "bf16 256x768", "q4g64:bf16 384x1024 e128k8").
func (k DecodeKernel) Key() string {
	f := k.DType.String()
	if k.Bits > 0 {
		f = fmt.Sprintf("q%dg%d:%s", k.Bits, k.Group, f)
	}
	s := fmt.Sprintf("%s %dx%d", f, k.Out, k.In)
	if k.Experts > 0 {
		s += fmt.Sprintf(" e%dk%d", k.Experts, k.TopK)
	}
	return s
}

// MarshalJSON writes the kernel with its Key (format and shape) first.
func (k DecodeKernel) MarshalJSON() ([]byte, error) {
	type plain DecodeKernel
	return json.Marshal(struct {
		Key string `json:"key"`
		plain
	}{k.Key(), plain(k)})
}

// decodeKernels lists the matrices one decode step multiplies by, from
// the headers: every 2-D weight (with its scales and biases when
// quantized), stacked expert banks (top-k gathered), per-expert weights
// (top-k of the bank's run), the tied embedding when it is the head;
// embedding lookups, norms, convolutions and the vision and audio towers
// are left out (decode reads a row of a table; towers run at prefill).
func decodeKernels(set *safetensors.Set, raw []byte, tied bool) []DecodeKernel {
	group, k := quantGroup(raw), topK(raw)
	perExpert := map[string]int{} // bank prefix → experts stored one per tensor
	for _, n := range set.Names() {
		if p, ok := expertPrefix(n); ok {
			perExpert[p]++
		}
	}
	byKey := map[string]*DecodeKernel{}
	var order []string
	add := func(kn DecodeKernel) {
		key := kn.Key()
		if kn.Routed {
			key += " routed"
		}
		if have, ok := byKey[key]; ok {
			have.Calls += kn.Calls
			return
		}
		byKey[key] = &kn
		order = append(order, key)
	}
	for _, n := range set.Names() {
		fused := !strings.HasSuffix(n, ".weight") && strings.Contains(n, ".experts.") // transformers' [E, out, in] banks
		if !strings.HasSuffix(n, ".weight") && !fused || offDecodePath(n) {
			continue
		}
		if strings.Contains(n, "embed_tokens") && (!tied || strings.Contains(n, "per_layer")) {
			continue
		}
		info, err := set.Info(n)
		if err != nil || (len(info.Shape) != 2 && len(info.Shape) != 3) || fused && len(info.Shape) != 3 {
			continue
		}
		base := strings.TrimSuffix(n, ".weight")
		kn := DecodeKernel{DType: info.DType, Out: info.Shape[len(info.Shape)-2], In: info.Shape[len(info.Shape)-1], Calls: 1, Bytes: info.Size()}
		if s, err := set.Info(base + ".scales"); err == nil && len(s.Shape) == len(info.Shape) {
			kn.DType, kn.Group = s.DType, group
			kn.In = s.Shape[len(s.Shape)-1] * group
			if kn.In > 0 {
				kn.Bits = info.Shape[len(info.Shape)-1] * 32 / kn.In
			}
			kn.Bytes += s.Size()
			if b, err := set.Info(base + ".biases"); err == nil {
				kn.Bytes += b.Size()
			}
		} else if !info.DType.IsFloat() {
			continue
		}
		if len(info.Shape) == 3 {
			if !isExpertName(n) {
				continue // convolutions
			}
			e := info.Shape[0]
			kn.Experts, kn.TopK, kn.Routed = e, min(k, e), true
			kn.Bytes = kn.Bytes / int64(e) * int64(kn.TopK)
		} else if p, ok := expertPrefix(n); ok {
			kn.TopK, kn.Routed, kn.PerExpert = min(k, perExpert[p]), true, perExpert[p]
			kn.Calls = float64(kn.TopK) / float64(perExpert[p])
		}
		add(kn)
	}
	out := make([]DecodeKernel, 0, len(order))
	for _, key := range order {
		out = append(out, *byKey[key])
	}
	return out
}

// offDecodePath reports tensors no decode step multiplies by: vision and
// audio towers and their projectors, multi-token-prediction heads.
func offDecodePath(n string) bool {
	for _, s := range []string{"vision", "visual", "audio", "multi_modal_projector", "embed_vision", "embed_audio", "mtp."} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// isExpertName reports a routed-expert tensor (HF per-expert or a stacked
// bank).
func isExpertName(n string) bool {
	return strings.Contains(n, ".experts.") || strings.Contains(n, ".switch_mlp.") || strings.Contains(n, ".switch_glu.")
}

// expertPrefix splits a per-expert tensor name "….experts.12.up_proj.weight"
// into its bank ("….experts.*.up_proj.weight"); ok false for any other.
func expertPrefix(n string) (string, bool) {
	i := strings.Index(n, ".experts.")
	if i < 0 {
		return "", false
	}
	rest := n[i+len(".experts."):]
	j := strings.IndexByte(rest, '.')
	if j <= 0 {
		return "", false
	}
	if _, err := strconv.Atoi(rest[:j]); err != nil {
		return "", false
	}
	return n[:i] + ".experts.*" + rest[j:], true
}

// quantGroup reads the quantization group size from config.json (64 when
// absent).
func quantGroup(raw []byte) int {
	var c struct {
		Q struct {
			G int `json:"group_size"`
		} `json:"quantization"`
		Text json.RawMessage `json:"text_config"`
	}
	_ = json.Unmarshal(raw, &c)
	if c.Q.G > 0 {
		return c.Q.G
	}
	if len(c.Text) > 0 {
		return quantGroup(c.Text)
	}
	return 64
}

// DecodeProbe is what the decode kernels measure on a backend: seconds
// per call of each kernel (DecodeKernel.Key), over enough copies that
// they are read from where decode reads them (memory for a model larger
// than the caches), and the seconds of one small element-wise operation
// on a hidden-sized row, which the rest of a layer (norms, rotary
// embedding, attention over a short context, residual adds) is counted in.
type DecodeProbe struct {
	Backend string `json:"backend"`
	// Seconds is each kernel's time per call.
	Seconds map[string]float64 `json:"seconds_per_call"`
	// OpSeconds is one element-wise op on a [1, 1, hidden] row.
	OpSeconds float64 `json:"op_seconds"`
	// ReadGBs is the best kernel bandwidth (bytes read per second, GB/s),
	// at which KV bytes are counted.
	ReadGBs float64 `json:"read_gbs"`
	// RouteSeconds is a routed MoE block's work besides its matrices
	// (SparseMoE's: router softmax, top-k, score normalisation, the
	// experts' gate activation and product, the weighted sum) for one
	// token (0: no routed experts).
	RouteSeconds float64 `json:"route_seconds,omitempty"`
}

// LayerOps is the element-wise operations a decoder layer runs besides
// its projections and norms, in the units of DecodeProbe.OpSeconds: the
// rotary embedding of queries and keys (about six each), attention over
// a short context (about eight), the activation and gate product and two
// residual adds (four). Each norm of the layer adds NormOps. Counted from
// the Llama block's code; BENCHMARKS.md holds the prediction to decode.
const (
	LayerOps = 24
	NormOps  = 4
)

// normsPerLayer is the checkpoint's norm weights per decoder layer (the
// 1-D "norm" tensors under a layer), on average.
func normsPerLayer(set *safetensors.Set, layers int) float64 {
	if layers <= 0 {
		return 0
	}
	n := 0
	for _, name := range set.Names() {
		if !strings.Contains(name, ".layers.") || !strings.Contains(name, "norm") || offDecodePath(name) {
			continue
		}
		if info, err := set.Info(name); err == nil && len(info.Shape) == 1 {
			n++
		}
	}
	return float64(n) / float64(layers)
}

// probeSet caps the bytes the probe allocates for one kernel (its copies
// cycled so that a model larger than the caches is read from memory as
// decode reads it).
const probeSet = 96 << 20

var probeMu sync.Mutex

// ProbeDecode measures kernels on be (seconds per call, the median of
// many calls cycling through copies), cached in the user's cache folder under the
// backend, the CPU, GOMAXPROCS and the kernels' keys: a second plan of the
// same model on the same machine reads the file. working is the bytes
// one decode step reads (sizes the copies so that each kernel is read
// from the cache level decode finds it in); hidden sizes the op probe;
// act is the activation dtype.
func ProbeDecode(be tensor.Backend, kernels []DecodeKernel, working int64, hidden int, act tensor.DType) (*DecodeProbe, error) {
	if be == nil {
		return nil, fmt.Errorf("model: ProbeDecode: no backend")
	}
	if !act.IsFloat() {
		act = tensor.Float32
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	seen := map[string]bool{}
	var keys []string
	for _, k := range kernels {
		if !seen[k.Key()] {
			seen[k.Key()] = true
			keys = append(keys, k.Key())
		}
	}
	sort.Strings(keys)
	setSize := min(max(working, 1), probeSet)
	id := fmt.Sprintf("v1|%s|%s|%d|%d|%d|%s|%s", be.Name(), cpuName(), runtime.GOMAXPROCS(0), setSize>>20, hidden, act, strings.Join(keys, ","))
	sum := sha256.Sum256([]byte(id))
	cache := probeCachePath(hex.EncodeToString(sum[:8]))
	if raw, err := os.ReadFile(cache); err == nil {
		var p DecodeProbe
		if json.Unmarshal(raw, &p) == nil && len(p.Seconds) == len(keys) && p.OpSeconds > 0 {
			return &p, nil
		}
	}
	p := &DecodeProbe{Backend: be.Name(), Seconds: map[string]float64{}}
	err := guard(func() {
		for _, k := range kernels {
			if _, done := p.Seconds[k.Key()]; done {
				continue
			}
			s := probeKernel(be, k, setSize, act)
			p.Seconds[k.Key()] = s
			if s > 0 {
				p.ReadGBs = max(p.ReadGBs, float64(k.Bytes)/s/1e9)
			}
		}
		p.OpSeconds = probeOps(be, max(hidden, 1), act)
		if e, k, inter := routedShape(kernels, hidden); e > 0 && k >= 1 && k <= e {
			p.RouteSeconds = probeRouting(be, e, k, hidden, inter, act)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("model: decode probe: %w", err)
	}
	if cache != "" {
		if raw, err := json.Marshal(p); err == nil && os.MkdirAll(filepath.Dir(cache), 0o755) == nil {
			_ = os.WriteFile(cache, raw, 0o644)
		}
	}
	return p, nil
}

// guard runs f, turning a tensor panic into an error.
func guard(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
				return
			}
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// probeCachePath is the probe's cache file for id ("" when there is no
// cache folder). MLXGO_CACHE_DIR overrides the user's cache folder.
func probeCachePath(id string) string {
	d := os.Getenv("MLXGO_CACHE_DIR")
	if d == "" {
		u, err := os.UserCacheDir()
		if err != nil || u == "" {
			return ""
		}
		d = filepath.Join(u, "mlxgo")
	}
	return filepath.Join(d, "decode-probe", id+".json")
}

// cpuName is the CPU's model name from /proc/cpuinfo (GOARCH elsewhere).
func cpuName() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// fillPattern fills b with a repeating valid element of dt (no NaNs or
// subnormals, which would slow float kernels); packed codes take any
// bytes.
func fillPattern(r *rand.Rand, b []byte, dt tensor.DType, packed bool) {
	if packed {
		r.Read(b)
		return
	}
	var pat []byte
	switch dt.Size() {
	case 2:
		v := tensor.F32ToBF16(0.01)
		if dt == tensor.Float16 {
			v = 0x211F // 0.01 in half precision
		}
		pat = []byte{byte(v), byte(v >> 8)}
	case 4:
		u := math.Float32bits(0.01)
		pat = []byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)}
	default:
		pat = []byte{1}
	}
	for i := 0; i < len(b); i += len(pat) {
		copy(b[i:], pat)
	}
}

// probeKernel times one call of k: copies of its matrices (filling a set
// of setSize bytes, at least one) multiplied by a [1, 1, In] row in turn,
// the median call.
func probeKernel(be tensor.Backend, k DecodeKernel, setSize int64, act tensor.DType) float64 {
	r := rand.New(rand.NewSource(1))
	rows := max(k.Experts, 1)
	var one int64 // bytes of one copy
	mk := func(shape []int, dt tensor.DType, packed bool) *tensor.Array {
		n := dt.Size()
		for _, d := range shape {
			n *= d
		}
		raw := make([]byte, n)
		fillPattern(r, raw, dt, packed)
		one += int64(n)
		return tensor.FromBytesOn(be, raw, shape, dt, false)
	}
	type mat struct{ w, s, b *tensor.Array }
	var mats []mat
	var owned []*tensor.Array
	defer func() { tensor.Free(owned...) }()
	lead := []int{}
	if k.Experts > 0 {
		lead = []int{rows}
	}
	shp := func(tail ...int) []int { return append(append([]int{}, lead...), tail...) }
	for len(mats) == 0 || int64(len(mats))*one < setSize {
		one = 0
		var m mat
		if k.Bits > 0 {
			m.w = mk(shp(k.Out, k.In*k.Bits/32), tensor.Uint32, true)
			m.s = mk(shp(k.Out, k.In/k.Group), k.DType, false)
			m.b = mk(shp(k.Out, k.In/k.Group), k.DType, false)
			owned = append(owned, m.w, m.s, m.b)
		} else {
			m.w = mk(shp(k.Out, k.In), k.DType, false)
			owned = append(owned, m.w)
		}
		mats = append(mats, m)
		if len(mats) >= 4096 {
			break
		}
	}
	xr := make([]byte, k.In*act.Size())
	fillPattern(r, xr, act, false)
	x := tensor.FromBytesOn(be, xr, []int{1, 1, k.In}, act, false)
	owned = append(owned, x)
	var inds []*tensor.Array
	var xe *tensor.Array
	if k.Experts > 0 {
		xe = tensor.Reshape(x, 1, 1, 1, k.In)
		owned = append(owned, xe)
		for range 8 {
			ids := r.Perm(k.Experts)[:k.TopK]
			v := make([]int32, len(ids))
			for i, e := range ids {
				v[i] = int32(e)
			}
			ia := int32s(be, v, 1, 1, len(v))
			inds = append(inds, ia)
			owned = append(owned, ia)
		}
	}
	call := func(i int, m mat) *tensor.Array {
		switch {
		case k.Experts > 0 && k.Bits > 0:
			return tensor.GatherQMM(xe, m.w, m.s, m.b, nil, inds[i%len(inds)], true, k.Group, k.Bits)
		case k.Experts > 0:
			w := tensor.Take(m.w, inds[i%len(inds)], 0)
			return tensor.Matmul(xe, tensor.SwapAxes(w, -1, -2))
		case k.Bits > 0:
			return tensor.QuantizedMatmul(x, m.w, m.s, m.b, true, k.Group, k.Bits)
		}
		return tensor.Matmul(x, tensor.Transpose(m.w))
	}
	// each call timed alone (cycling through the copies, so the cache
	// sees what decode's stream of weights leaves it), the median call:
	// the few a busy machine preempts do not count
	i := 0
	one1 := func() {
		sc := tensor.NewScope()
		defer sc.Close()
		tensor.Eval(call(i, mats[i%len(mats)]))
		i++
	}
	for range len(mats) {
		one1() // warm: first-touch pages, kernel set-up
	}
	return medianPass(one1, len(mats))
}

// medianPass runs pass at least max(15, min) times and for at least 30
// ms and returns the median seconds of one: robust to the other work of a
// shared machine, which preempts a few.
func medianPass(pass func(), min int) float64 {
	var ts []float64
	start := time.Now()
	for len(ts) < 15 || len(ts) < min || time.Since(start) < 30*time.Millisecond {
		t0 := time.Now()
		pass()
		ts = append(ts, time.Since(t0).Seconds())
		if len(ts) >= 20000 {
			break
		}
	}
	sort.Float64s(ts)
	return ts[len(ts)/2]
}

// routedShape finds the routed experts' count, top-k and width among
// kernels (the bank whose input is the hidden size); 0 when none.
func routedShape(kernels []DecodeKernel, hidden int) (experts, k, inter int) {
	for _, kn := range kernels {
		if kn.In != hidden {
			continue
		}
		switch {
		case kn.Experts > 0:
			return kn.Experts, kn.TopK, kn.Out
		case kn.Routed && kn.PerExpert > 0:
			return kn.PerExpert, kn.TopK, kn.Out
		}
	}
	return 0, 0, 0
}

// probeRouting times SparseMoE's work around its matrices for one token:
// the router logits' softmax and top-k, the scores' normalisation, the
// gate activation and product of k expert rows and their weighted sum
// (the median of many).
func probeRouting(be tensor.Backend, experts, k, hidden, inter int, act tensor.DType) float64 {
	r := rand.New(rand.NewSource(3))
	mk := func(n int, shape ...int) *tensor.Array {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return tensor.FromFloat32On(be, v, shape, act)
	}
	owned := []*tensor.Array{mk(experts, 1, 1, experts), mk(k*inter, 1, 1, k, 1, inter), mk(k*inter, 1, 1, k, 1, inter), mk(k*hidden, 1, 1, k, hidden)}
	defer tensor.Free(owned...)
	logits, g, u, y := owned[0], owned[1], owned[2], owned[3]
	run := func() {
		sc := tensor.NewScope()
		defer sc.Close()
		gates := tensor.Softmax(tensor.AsType(logits, tensor.Float32), -1)
		_, scores := TopKRouting(gates, k)
		scores = tensor.Div(scores, tensor.Sum(scores, []int{-1}, true))
		h := tensor.Squeeze(glu(nil, g, u), -2)
		w := tensor.ExpandDims(tensor.AsType(scores, act), -1)
		tensor.Eval(h, tensor.Sum(tensor.Mul(y, w), []int{-2}, false))
	}
	run()
	return medianPass(run, 0)
}

// probeOps times one element-wise op on a [1, 1, hidden] row: chains of
// 64 multiply-adds, the median chain.
func probeOps(be tensor.Backend, hidden int, act tensor.DType) float64 {
	r := rand.New(rand.NewSource(2))
	raw := make([]byte, hidden*act.Size())
	fillPattern(r, raw, act, false)
	x := tensor.FromBytesOn(be, raw, []int{1, 1, hidden}, act, false)
	defer x.Free()
	const chain = 64
	run := func() {
		sc := tensor.NewScope()
		defer sc.Close()
		y := x
		for range chain {
			y = tensor.Add(tensor.Mul(y, x), x)
		}
		tensor.Eval(y)
	}
	run()
	return medianPass(run, 0) / (2 * chain)
}
