package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// PlanOptions are the inputs of a memory plan (PlanMemory).
type PlanOptions struct {
	// Context is the tokens each sequence holds (0: 4096, capped at the
	// model's max_position_embeddings).
	Context int
	// Batch is the number of sequences decoded together (0: 1).
	Batch int
	// Memory is the bytes the plan may use (0: MemAvailable from
	// /proc/meminfo).
	Memory int64
	// Stream plans routed experts streamed from disk (ExpertStreaming)
	// through a cache of ExpertCacheBytes instead of resident.
	Stream           bool
	ExpertCacheBytes int64
	// KVBits, when not 0, plans affine-quantized keys and values (group
	// size KVGroup, 0: 64) on the layers that store them.
	KVBits, KVGroup int
	// PrefillChunk is the prompt tokens run per pass (0: 512), which sizes
	// the prefill transients.
	PrefillChunk int
	// BandwidthGBs is the memory bandwidth decode is predicted with
	// (GB/s) when Predict is off: bytes per step ÷ bandwidth, a roofline
	// (0: no prediction).
	BandwidthGBs float64
	// Predict measures the checkpoint's decode kernels on Backend (nil:
	// the CPU backend) with ProbeDecode (cached per machine) and predicts
	// decode tokens/s from them (Plan.DecodeSeconds).
	Predict bool
	Backend tensor.Backend
}

// Plan is a model's memory plan: what its weights, experts, caches and
// transients take at a context and batch, against the memory there is.
// Every size comes from the checkpoint's headers and config (see
// PlanMemory for the few small tensors an architecture may read).
type Plan struct {
	ModelType string `json:"model_type"`
	Context   int    `json:"context_tokens"`
	Batch     int    `json:"batch"`
	// WeightsBytes is every tensor's data in the checkpoint's files.
	WeightsBytes int64 `json:"weights_bytes"`
	// ExpertBytes is the routed experts' share of WeightsBytes;
	// ResidentWeightsBytes what stays in memory (all of it, or the rest
	// when experts stream).
	ExpertBytes          int64 `json:"expert_bytes"`
	ResidentWeightsBytes int64 `json:"resident_weights_bytes"`
	Streamed             bool  `json:"experts_streamed"`
	// ExpertCacheBytes is the streamed experts' working set: the cache
	// budget (at least one MoE block's routed union for the batch) and
	// its recycled read buffers, up to all the experts.
	ExpertCacheBytes int64 `json:"expert_cache_bytes"`
	// ActiveExpertBytesPerToken is the expert bytes one token's routes
	// read, over all MoE layers.
	ActiveExpertBytesPerToken int64 `json:"active_expert_bytes_per_token"`
	// Layers is each layer's cache; KVBytesPerToken sums what a token adds
	// to a sequence over the layers that grow (full and latent; sliding
	// ones until their window).
	Layers          []LayerKV `json:"layers"`
	KVBytesPerToken int64     `json:"kv_bytes_per_token"`
	// KVByKind sums per-token bytes (fixed bytes for recurrent layers) by
	// layer kind.
	KVByKind map[string]int64 `json:"kv_bytes_per_token_by_kind"`
	// KVBytes is what the caches hold at Context × Batch: growing layers
	// rounded up to whole kv.Step allocations, sliding ones capped at
	// their window, recurrent states once per sequence.
	KVBytes int64 `json:"kv_bytes"`
	// PrefillBytes estimates a prefill chunk's transients (activations,
	// attention scores, the logits row).
	PrefillBytes int64 `json:"prefill_transient_bytes"`
	// ReserveBytes is headroom for the runtime and allocator slack.
	ReserveBytes int64 `json:"reserve_bytes"`
	TotalBytes   int64 `json:"total_bytes"`
	MemoryBytes  int64 `json:"memory_bytes"`
	Fits         bool  `json:"fits"`
	// MaxContext is the largest context that fits at Batch (0: none);
	// MaxBatch the largest batch at Context. ModelMaxContext is the
	// config's max_position_embeddings (0: unknown), which caps MaxContext.
	MaxContext      int `json:"max_safe_context"`
	MaxBatch        int `json:"max_batch"`
	ModelMaxContext int `json:"model_max_context,omitempty"`
	// DecodeBytesPerToken is what one decode step reads per sequence
	// (dense weights and active experts shared by the batch, KV per
	// sequence); PredictedDecodeTPS is the batch's tokens/s at
	// BandwidthGBs (0: not predicted).
	DecodeBytesPerToken int64   `json:"decode_bytes_per_token"`
	PredictedDecodeTPS  float64 `json:"predicted_decode_tps,omitempty"`
	// Kernels are the matrices a decode step multiplies by (the dense
	// projections, the head, the routed experts' gathers), from the
	// headers.
	Kernels []DecodeKernel `json:"decode_kernels,omitempty"`
	// DecodeSeconds is the predicted step (PlanOptions.Predict), by term:
	// "weights" (dense kernels at their measured seconds per call),
	// "experts" (routed gathers), "routing" (the MoE blocks' work around
	// their matrices), "ops" (LayerOps + NormOps per norm element-wise ops per layer), "kv"
	// (the caches at Context read at the probe's bandwidth).
	DecodeSeconds map[string]float64 `json:"predicted_step_seconds,omitempty"`
	// Shrink names the term to shrink first when the plan does not fit.
	Shrink string `json:"shrink,omitempty"`

	moeLayers int     // streamed MoE layers (three banks each)
	layers    int     // decoder layers
	norms     float64 // norm weights per layer
	probe     *DecodeProbe
}

// kernelBytes is what one step's kernels read: the dense ones and the
// routed experts' (one token's routes).
func (p *Plan) kernelBytes() (dense, experts int64) {
	for _, k := range p.Kernels {
		n := int64(math.Round(k.Calls * float64(k.Bytes)))
		if k.Routed {
			experts += n
		} else {
			dense += n
		}
	}
	return dense, experts
}

// predict fills DecodeSeconds and PredictedDecodeTPS from the probe: each
// kernel's calls at its measured seconds (a batch's rows share a dense
// call; routed gathers grow with the batch's distinct routes, at most
// all experts), LayerOps ops and NormOps per norm per layer and the
// probed routing per MoE layer per row, the caches at the probe's read
// bandwidth.
func (p *Plan) predict() {
	pr := p.probe
	t := map[string]float64{}
	b := float64(p.Batch)
	for _, k := range p.Kernels {
		s := pr.Seconds[k.Key()] * k.Calls
		if k.Routed {
			t["experts"] += s * min(b, rowsToFill(k))
		} else {
			t["weights"] += s
		}
	}
	t["ops"] = float64(p.layers) * (LayerOps + NormOps*p.norms) * pr.OpSeconds * b
	if pr.RouteSeconds > 0 {
		t["routing"] = p.routedLayers() * pr.RouteSeconds * b
	}
	if pr.ReadGBs > 0 {
		t["kv"] = float64(p.kvAt(p.Context, p.Batch)) / (pr.ReadGBs * 1e9)
	}
	var step float64
	for _, v := range t {
		step += v
	}
	p.DecodeSeconds = t
	if step > 0 {
		p.PredictedDecodeTPS = b / step
	}
}

// routedLayers counts the MoE layers among the kernels: a layer has one
// routed down projection (a bank called once, or top-k per-expert calls)
// whose output is the hidden size, the widest routed output.
func (p *Plan) routedLayers() float64 {
	out := 0
	for _, k := range p.Kernels {
		if k.Routed {
			out = max(out, k.Out)
		}
	}
	var n float64
	for _, k := range p.Kernels {
		if !k.Routed || k.Out != out {
			continue
		}
		if k.Experts > 0 {
			n += k.Calls
		} else if k.TopK > 0 {
			n += k.Calls / float64(k.TopK)
		}
	}
	return n
}

// rowsToFill is how many rows' routes reach every expert of k's bank
// (experts ÷ top-k), beyond which a batch reads no more.
func rowsToFill(k DecodeKernel) float64 {
	if k.Experts > 0 && k.TopK > 0 {
		return float64(k.Experts) / float64(k.TopK)
	}
	if k.Routed && k.TopK > 0 {
		return float64(k.PerExpert) / float64(k.TopK)
	}
	return 1
}

// PlanMemory plans the model in dir. It opens the checkpoint's headers
// and builds the architecture over the unread mapping on the CPU backend
// with experts streamed (so no expert is read, and dense tensors are
// mapped, not touched, apart from those some architectures fold at load:
// norm offsets, router scales, MLA's per-head split of kv_b_proj), to
// learn each layer's cache from the same code that makes it. Estimates:
// PrefillBytes (activations and one layer's float32 scores per chunk),
// ReserveBytes (256 MiB and 2 % of the resident weights) and
// PredictedDecodeTPS (bytes per step over BandwidthGBs, experts assumed
// resident: misses add their reads).
func PlanMemory(dir string, opts PlanOptions) (*Plan, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	arch, err := Lookup(cfg)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w: %w", ErrCheckpoint, err)
	}
	defer set.Close()
	be, err := tensor.Open("cpu")
	if err != nil {
		return nil, fmt.Errorf("model: plan needs the CPU backend: %w", err)
	}
	m, err := Build(arch, cfg, set, &LoadOptions{Backend: be, Experts: &ExpertStreaming{}})
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	defer m.Close()
	layers, err := kvLayout(m.arch)
	if err != nil {
		return nil, err
	}
	st := m.w.stream.snapshot()
	p := &Plan{ModelType: cfg.ModelType, Layers: layers, ExpertBytes: st.TotalBytes, Streamed: opts.Stream && st.Experts > 0}
	var lookup int64 // embedding tables, of which decode reads rows only
	for _, f := range set.Files() {
		for _, n := range f.Names() {
			info, _ := f.Info(n)
			p.WeightsBytes += info.Size()
			if strings.Contains(n, "embed_tokens") {
				lookup += info.Size()
			}
		}
	}
	if h, ok := headProjection(m.arch); ok {
		if _, tied := h.(*TiedHead); tied {
			lookup = 0
		}
	}
	info := m.Info()
	p.ModelMaxContext = maxPositions(cfg.Raw)
	p.applyKVQuant(opts, info.DType)
	p.ActiveExpertBytesPerToken = activeExpertBytes(m.w.stream, cfg.Raw)
	p.moeLayers = len(m.w.stream.banks) / 3
	tiedHead := false
	if h, ok := headProjection(m.arch); ok {
		_, tiedHead = h.(*TiedHead)
	}
	p.Kernels = decodeKernels(set, cfg.Raw, tiedHead)
	p.layers = info.Layers
	p.norms = normsPerLayer(set, info.Layers)
	if opts.Predict {
		pbe := opts.Backend
		if pbe == nil {
			pbe = be
		}
		dense, experts := p.kernelBytes()
		if p.probe, err = ProbeDecode(pbe, p.Kernels, dense+experts, info.Hidden, info.DType); err != nil {
			return nil, err
		}
	}
	p.evaluate(opts, info, lookup)
	return p, nil
}

// evaluate fills the sizes that depend on context, batch and memory.
func (p *Plan) evaluate(opts PlanOptions, info Info, lookup int64) {
	p.Context, p.Batch = opts.Context, max(opts.Batch, 1)
	if p.Context <= 0 {
		p.Context = 4096
		if p.ModelMaxContext > 0 {
			p.Context = min(p.Context, p.ModelMaxContext)
		}
	}
	p.KVByKind = map[string]int64{}
	p.KVBytesPerToken = 0
	for _, l := range p.Layers {
		p.KVByKind[l.Kind] += l.BytesPerToken + l.FixedBytes
		if l.Kind == KVFull || l.Kind == KVLatent || l.Kind == KVSliding {
			p.KVBytesPerToken += l.BytesPerToken
		}
	}
	p.ResidentWeightsBytes = p.WeightsBytes
	p.ExpertCacheBytes = 0
	if p.Streamed {
		p.ResidentWeightsBytes -= p.ExpertBytes
		// a block's routed union is resident while it runs, whatever the budget
		moeLayers := int64(max(p.moeLayers, 1))
		block := p.ActiveExpertBytesPerToken / moeLayers * int64(p.Batch)
		// the cache, at least that union, and its recycled read buffers
		// (an eighth of the budget more)
		c := max(opts.ExpertCacheBytes, 0)
		p.ExpertCacheBytes = min(max(c, block)+c/8, p.ExpertBytes)
	}
	chunk := opts.PrefillChunk
	if chunk <= 0 {
		chunk = 512
	}
	p.PrefillBytes = prefillBytes(info, p, min(chunk, p.Context))
	p.ReserveBytes = 256<<20 + p.ResidentWeightsBytes/50
	p.MemoryBytes = opts.Memory
	if p.MemoryBytes <= 0 {
		p.MemoryBytes = memAvailable()
	}
	p.KVBytes = p.kvAt(p.Context, p.Batch)
	p.TotalBytes = p.fixedBytes() + p.KVBytes
	p.Fits = p.TotalBytes <= p.MemoryBytes
	p.MaxContext = largest(func(n int) bool { return p.fixedBytes()+p.kvAt(n, p.Batch) <= p.MemoryBytes }, p.ModelMaxContext)
	p.MaxBatch = largest(func(b int) bool { return p.fixedBytes()+p.kvAt(p.Context, b) <= p.MemoryBytes }, 0)
	if !p.Fits {
		p.Shrink = p.shrinkTerm()
	}
	dense, active := p.kernelBytes()
	if len(p.Kernels) == 0 {
		dense = p.ResidentWeightsBytes - lookup
		if !p.Streamed {
			dense -= p.ExpertBytes
		}
		active = p.ActiveExpertBytesPerToken
	}
	p.DecodeBytesPerToken = dense/int64(p.Batch) + active + p.kvAt(p.Context, 1)
	p.PredictedDecodeTPS, p.DecodeSeconds = 0, nil
	switch {
	case p.probe != nil:
		p.predict()
	case opts.BandwidthGBs > 0 && p.DecodeBytesPerToken > 0:
		perStep := dense + min(active*int64(p.Batch), p.ExpertBytes) + p.kvAt(p.Context, p.Batch)
		p.PredictedDecodeTPS = float64(p.Batch) * opts.BandwidthGBs * 1e9 / float64(perStep)
	}
}

// fixedBytes is the total less the KV caches.
func (p *Plan) fixedBytes() int64 {
	return p.ResidentWeightsBytes + p.ExpertCacheBytes + p.PrefillBytes + p.ReserveBytes
}

// kvAt is the cache bytes of b sequences of n tokens.
func (p *Plan) kvAt(n, b int) int64 {
	grown := int64((n + kv.Step - 1) / kv.Step * kv.Step)
	var per int64
	for _, l := range p.Layers {
		switch l.Kind {
		case KVFull, KVLatent:
			per += l.BytesPerToken * grown
		case KVSliding:
			per += l.BytesPerToken * int64(min(n, l.Window))
		case KVRecurrent:
			per += l.FixedBytes
		}
	}
	return per * int64(b)
}

// largest is the largest n ≥ 1 (at most limit when limit > 0) with ok(n),
// 0 when even 1 fails; ok must be monotone.
func largest(ok func(int) bool, limit int) int {
	if !ok(1) {
		return 0
	}
	hi := 1 << 24
	if limit > 0 {
		hi = limit
	}
	if ok(hi) {
		return hi
	}
	lo := 1 // ok(lo), !ok(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// applyKVQuant rewrites per-token bytes for quantized keys and values:
// packed codes plus a scale and a bias per group, both in the activation
// dtype.
func (p *Plan) applyKVQuant(opts PlanOptions, dt tensor.DType) {
	if opts.KVBits <= 0 {
		return
	}
	g := opts.KVGroup
	if g <= 0 {
		g = 64
	}
	es := int64(dt.Size())
	for i, l := range p.Layers {
		if l.Kind != KVFull && l.Kind != KVSliding {
			continue
		}
		elems := l.BytesPerToken / es // K and V elements per token
		p.Layers[i].BytesPerToken = elems*int64(opts.KVBits)/8 + 2*(elems/int64(g))*es
	}
}

// activeExpertBytes is the expert bytes one token routes through: per MoE
// layer, top-k of its experts' three matrices.
func activeExpertBytes(s *expertStore, raw []byte) int64 {
	if s == nil || len(s.banks) == 0 {
		return 0
	}
	k := topK(raw)
	var total int64
	for _, b := range s.banks {
		var bank int64
		for _, ps := range b.parts {
			for _, pt := range ps {
				bank += pt.n
			}
		}
		total += bank / int64(b.n) * int64(min(k, b.n))
	}
	return total
}

// topK reads the experts per token from config.json (or its text_config).
func topK(raw []byte) int {
	var c struct {
		K1   int             `json:"num_experts_per_tok"`
		K2   int             `json:"top_k_experts"`
		Text json.RawMessage `json:"text_config"`
	}
	_ = json.Unmarshal(raw, &c)
	if k := max(c.K1, c.K2); k > 0 {
		return k
	}
	if len(c.Text) > 0 {
		return topK(c.Text)
	}
	return 1
}

// maxPositions reads max_position_embeddings (0: absent).
func maxPositions(raw []byte) int {
	var c struct {
		N    int             `json:"max_position_embeddings"`
		Text json.RawMessage `json:"text_config"`
	}
	_ = json.Unmarshal(raw, &c)
	if c.N == 0 && len(c.Text) > 0 {
		return maxPositions(c.Text)
	}
	return c.N
}

// prefillBytes estimates one prefill chunk's transients: a few hidden
// and MLP-wide activations per token, one layer's attention scores in
// float32 (the widest of any layer's keys), and the final logits row.
func prefillBytes(info Info, p *Plan, chunk int) int64 {
	es := int64(info.DType.Size())
	keys := int64(p.Context)
	heads := int64(0)
	for _, l := range p.Layers {
		heads = max(heads, l.BytesPerToken/es/2)
	}
	act := int64(chunk) * int64(info.Hidden) * es * 8
	scores := int64(chunk) * keys * 4 * max(heads/64, 1) // per-head score rows, heads of 64 dims
	logits := int64(p.Batch) * int64(info.Vocab) * 4
	return act + scores + logits
}

// memAvailable is MemAvailable from /proc/meminfo (0 where unknown).
func memAvailable() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			if kb, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// headProjection returns an architecture's output head when it has one
// the plan can inspect.
func headProjection(a Architecture) (Projection, bool) {
	switch m := a.(type) {
	case *Llama:
		return m.Head, true
	case *Generic:
		return m.Head, true
	case *Gemma4:
		return m.Head, true
	case *Qwen35:
		return m.Head, true
	case *MLA:
		return m.Head, true
	}
	return nil, false
}

// KVBytesAt is what the caches hold for batch sequences of context
// tokens, by the plan's equation (see Plan.KVBytes).
func (p *Plan) KVBytesAt(context, batch int) int64 { return p.kvAt(context, max(batch, 1)) }

// FixedBytes is the plan's total less its KV caches: resident weights,
// the expert working set, prefill transients and the reserve.
func (p *Plan) FixedBytes() int64 { return p.fixedBytes() }

// shrinkTerm names the largest term a flag can shrink, with the flag.
func (p *Plan) shrinkTerm() string {
	terms := []struct {
		name string
		n    int64
	}{
		{"weights (a smaller or more quantized model)", p.ResidentWeightsBytes},
		{"KV cache (--context, --batch, or --kv-bits)", p.KVBytes},
		{"prefill transients (--prefill-chunk-size)", p.PrefillBytes},
		{"expert cache (--expert-cache-bytes)", p.ExpertCacheBytes},
	}
	best := 0
	for i, t := range terms {
		if t.n > terms[best].n {
			best = i
		}
	}
	if best == 0 && !p.Streamed && p.ExpertBytes > 0 {
		return "weights (stream the experts: --expert-offload)"
	}
	if p.ReserveBytes+p.ResidentWeightsBytes > p.MemoryBytes && p.ReserveBytes > p.ResidentWeightsBytes {
		return fmt.Sprintf("memory: the runtime reserve alone is %d bytes", p.ReserveBytes)
	}
	return terms[best].name
}
