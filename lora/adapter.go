package lora

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// ErrAdapter marks an adapter folder that cannot be read, or that does not
// fit the model it is mounted on. ErrUnsupported (model's) marks an
// adapter kind this package does not implement (DoRA, embedding LoRA).
var ErrAdapter = errors.New("bad adapter")

// Formats of adapter folders.
const (
	// FormatPEFT is Hugging Face PEFT's: adapter_config.json and
	// adapter_model.safetensors with lora_A [r, in] and lora_B [out, r].
	FormatPEFT = "peft"
	// FormatMLX is mlx-lm's: adapter_config.json (lora_parameters) and
	// adapters.safetensors with lora_a [in, r] and lora_b [r, out].
	FormatMLX = "mlx"
)

// File names of the two formats.
const (
	peftConfig  = "adapter_config.json"
	peftWeights = "adapter_model.safetensors"
	mlxWeights  = "adapters.safetensors"
)

// Adapter is one LoRA adapter read from a folder: for each module it
// adapts, the low-rank pair whose product, scaled, is added to that
// module's output. Its arrays live until Free.
type Adapter struct {
	// Dir is the folder it was read from.
	Dir string
	// Format is FormatPEFT or FormatMLX.
	Format string
	// Rank is the largest rank of its modules; Scale is the config's
	// scale (PEFT: lora_alpha / r, or / √r with use_rslora; mlx-lm:
	// lora_parameters.scale). Modules may have their own (rank_pattern,
	// alpha_pattern).
	Rank  int
	Scale float64
	// Deltas holds each adapted module's pair, keyed by the module's path
	// relative to the text model ("layers.0.self_attn.q_proj"; expert banks
	// under MLX's stacked name "layers.0.mlp.switch_mlp.gate_proj").
	Deltas map[string]*Delta
	// SizeBytes is the size of the adapter's tensors as stored.
	SizeBytes int64
	// Digest is the SHA-256 (hex) of its config and weights files as
	// read: what it computes, for keys of caches that outlive a mount or
	// the process (Host.Key). Empty for an adapter not read by Load.
	Digest string
}

// Delta is one module's low-rank residual x·Aᵀ·Bᵀ·Scale (PEFT's
// lora_B(lora_A(x))·scaling, mlx-lm's (x·lora_a)·lora_b·scale).
type Delta struct {
	// Name is the module as the adapter file names it.
	Name string
	// A is [r, in] and B [out, r], laid out as a dense layer's weight
	// (PEFT's lora_A.weight and lora_B.weight, mlx-lm's lora_a and lora_b
	// transposed); for an expert bank A is [E, r, in] and B [E, out, r],
	// expert e's pair at index e.
	A, B *tensor.Array
	// Scale multiplies the product.
	Scale float64
	// Rank, In and Out are r and the module's input and output widths;
	// Experts is E for a bank (0 for a dense layer).
	Rank, In, Out, Experts int
}

// Free frees the adapter's arrays.
func (a *Adapter) Free() {
	if a == nil {
		return
	}
	for _, d := range a.Deltas {
		tensor.Free(d.A, d.B)
	}
	a.Deltas = nil
}

// Layers is the number of modules the adapter adapts.
func (a *Adapter) Layers() int { return len(a.Deltas) }

// Relative strips a module path of the prefixes checkpoints and adapter
// files put before the text model's modules (PEFT's "base_model.model.",
// then one of model.Prefixes), so that an adapter's module names and a
// model's layer paths compare: "base_model.model.model.layers.0.mlp.up_proj"
// and "model.language_model.layers.0.mlp.up_proj" are both
// "layers.0.mlp.up_proj".
func Relative(path string) string {
	path = strings.TrimPrefix(path, "base_model.model.")
	best := ""
	for _, p := range model.Prefixes {
		if p != "" && strings.HasPrefix(path, p) && len(p) > len(best) {
			best = p
		}
	}
	return strings.TrimPrefix(path, best)
}

// Load reads the adapter in dir, PEFT's format or mlx-lm's (told apart by
// the weights file), onto be (nil: the default backend). It validates the
// file against its config; whether it fits a model is checked when it is
// mounted (Host.Mount). DoRA adapters and adapters of embeddings are
// refused with ErrUnsupported.
func Load(dir string, be tensor.Backend) (a *Adapter, err error) {
	if be == nil {
		be = tensor.Default()
	}
	cfgRaw, err := os.ReadFile(filepath.Join(dir, peftConfig))
	if err != nil {
		return nil, fmt.Errorf("lora: %w: %s: %v", ErrAdapter, dir, err)
	}
	var weights, format string
	switch {
	case exists(filepath.Join(dir, peftWeights)):
		weights, format = peftWeights, FormatPEFT
	case exists(filepath.Join(dir, mlxWeights)):
		weights, format = mlxWeights, FormatMLX
	case exists(filepath.Join(dir, "adapter_model.bin")):
		return nil, fmt.Errorf("lora: %w: %s: adapter_model.bin (pickle) is not read; save the adapter with safe_serialization", model.ErrUnsupported, dir)
	default:
		return nil, fmt.Errorf("lora: %w: %s: neither %s (PEFT) nor %s (mlx-lm)", ErrAdapter, dir, peftWeights, mlxWeights)
	}
	f, err := safetensors.Open(filepath.Join(dir, weights))
	if err != nil {
		return nil, fmt.Errorf("lora: %w: %w", ErrAdapter, err)
	}
	defer f.Close()
	a = &Adapter{Dir: dir, Format: format, Deltas: map[string]*Delta{}}
	made := a
	defer func() {
		if err != nil {
			made.Free()
			a = nil
		}
	}()
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		a.SizeBytes += info.Size()
	}
	var rerr error
	err = tensor.Try(func() {
		if format == FormatPEFT {
			rerr = a.readPEFT(cfgRaw, f, be)
		} else {
			rerr = a.readMLX(cfgRaw, f, be)
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if !errors.Is(err, ErrAdapter) && !errors.Is(err, model.ErrUnsupported) {
			err = fmt.Errorf("lora: %w: %s: %w", ErrAdapter, dir, err)
		}
		return nil, err
	}
	if len(a.Deltas) == 0 {
		return nil, fmt.Errorf("lora: %w: %s: %s holds no LoRA pairs", ErrAdapter, dir, weights)
	}
	for _, d := range a.Deltas {
		a.Rank = max(a.Rank, d.Rank)
	}
	if a.Digest, err = digest(cfgRaw, filepath.Join(dir, weights)); err != nil {
		return nil, fmt.Errorf("lora: %w: %s: %v", ErrAdapter, dir, err)
	}
	return a, nil
}

// digest is the SHA-256 of an adapter's config bytes and weights file.
func digest(cfg []byte, weights string) (string, error) {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(cfg)))
	h.Write(n[:])
	h.Write(cfg)
	f, err := os.Open(weights)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// peftConfigJSON is the part of PEFT's adapter_config.json that decides
// what the adapter computes.
type peftConfigJSON struct {
	PeftType         string          `json:"peft_type"`
	R                int             `json:"r"`
	Alpha            float64         `json:"lora_alpha"`
	RSLoRA           bool            `json:"use_rslora"`
	DoRA             bool            `json:"use_dora"`
	Bias             string          `json:"bias"`
	FanInFanOut      bool            `json:"fan_in_fan_out"`
	LoraBias         bool            `json:"lora_bias"`
	TargetModules    json.RawMessage `json:"target_modules"`
	RankPattern      json.RawMessage `json:"rank_pattern"`
	AlphaPattern     json.RawMessage `json:"alpha_pattern"`
	ModulesToSave    []string        `json:"modules_to_save"`
	TargetParameters []string        `json:"target_parameters"`
	LayerReplication json.RawMessage `json:"layer_replication"`
	QALoRA           bool            `json:"use_qalora"`
	ALoRATokens      json.RawMessage `json:"alora_invocation_tokens"`
}

// pattern is one rank_pattern or alpha_pattern entry, in file order
// (PEFT takes the first key that matches).
type pattern struct {
	re  *regexp.Regexp
	key string
	val float64
}

// readPatterns reads a JSON object of numbers in key order, compiling each
// key as PEFT matches it: the whole module name or a dot-separated suffix,
// as a regular expression.
func readPatterns(field string, raw json.RawMessage) ([]pattern, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("%s: want an object", field)
	}
	var out []pattern
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", field, err)
		}
		k, _ := t.(string)
		var v float64
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s[%q]: %v", field, k, err)
		}
		re, err := regexp.Compile(`^(.*\.)?(` + k + `)$`)
		if err != nil {
			return nil, fmt.Errorf("%s[%q]: %v", field, k, err)
		}
		out = append(out, pattern{re: re, key: k, val: v})
	}
	return out, nil
}

// lookup returns the first pattern matching name, or def.
func lookup(ps []pattern, name string, def float64) float64 {
	for _, p := range ps {
		if p.re.MatchString(name) {
			return p.val
		}
	}
	return def
}

// targets is target_modules: a list of names (a module matches one when
// it is the name or ends with "." + name) or one regular expression the
// whole module name must match.
type targets struct {
	names []string
	re    *regexp.Regexp
	all   bool
}

func readTargets(raw json.RawMessage) (targets, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return targets{all: true}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "all-linear" {
			return targets{all: true}, nil
		}
		re, err := regexp.Compile(`^(?:` + s + `)$`)
		if err != nil {
			return targets{}, fmt.Errorf("target_modules %q: %v", s, err)
		}
		return targets{re: re}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return targets{}, fmt.Errorf("target_modules: want a list or a string: %v", err)
	}
	return targets{names: l}, nil
}

func (t targets) match(name string) bool {
	switch {
	case t.all:
		return true
	case t.re != nil:
		return t.re.MatchString(name)
	}
	for _, n := range t.names {
		if name == n || strings.HasSuffix(name, "."+n) {
			return true
		}
	}
	return false
}

// peftKey matches PEFT's saved tensor names: the module, the part, an
// optional adapter name, the tensor.
var peftKey = regexp.MustCompile(`^(.*)\.(lora_A|lora_B|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)(?:\.[^.]+)?\.weight$|^(.*)\.(lora_embedding_A|lora_embedding_B|lora_magnitude_vector)(?:\.[^.]+)?$`)

// expertKey matches a per-expert module of an HF checkpoint.
var expertKey = regexp.MustCompile(`^(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)$`)

func (a *Adapter) readPEFT(raw []byte, f *safetensors.File, be tensor.Backend) error {
	var c peftConfigJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("lora: %w: %s: %s: %v", ErrAdapter, a.Dir, peftConfig, err)
	}
	bad := func(what string) error {
		return fmt.Errorf("lora: %w: %s: %s: %s", model.ErrUnsupported, a.Dir, peftConfig, what)
	}
	switch {
	case c.PeftType != "" && !strings.EqualFold(c.PeftType, "LORA"):
		return bad(fmt.Sprintf("peft_type %q (only LORA adapters are supported)", c.PeftType))
	case c.DoRA:
		return bad("use_dora is true: DoRA adapters are not supported (their magnitude vector renormalises the merged weight, which an unmerged residual cannot do)")
	case c.Bias != "" && c.Bias != "none":
		return bad(fmt.Sprintf("bias %q (only \"none\": adapters that train the base biases are not supported)", c.Bias))
	case c.LoraBias:
		return bad("lora_bias is true (LoRA B with a bias is not supported)")
	case c.FanInFanOut:
		return bad("fan_in_fan_out is true (Conv1D-style layers are not supported)")
	case len(c.ModulesToSave) > 0:
		return bad(fmt.Sprintf("modules_to_save %v (fully trained modules are not supported)", c.ModulesToSave))
	case len(c.LayerReplication) > 0 && string(c.LayerReplication) != "null":
		return bad("layer_replication is set (not supported)")
	case c.QALoRA:
		return bad("use_qalora is true (not supported)")
	case len(c.ALoRATokens) > 0 && string(c.ALoRATokens) != "null":
		return bad("alora_invocation_tokens is set (activated LoRA is not supported)")
	case c.R <= 0:
		return fmt.Errorf("lora: %w: %s: %s: r is %d", ErrAdapter, a.Dir, peftConfig, c.R)
	}
	tg, err := readTargets(c.TargetModules)
	if err != nil {
		return fmt.Errorf("lora: %w: %s: %s: %v", ErrAdapter, a.Dir, peftConfig, err)
	}
	ranks, err := readPatterns("rank_pattern", c.RankPattern)
	if err == nil {
		var alphas []pattern
		alphas, err = readPatterns("alpha_pattern", c.AlphaPattern)
		if err == nil {
			return a.readPEFTTensors(c, tg, ranks, alphas, f, be)
		}
	}
	return fmt.Errorf("lora: %w: %s: %s: %v", ErrAdapter, a.Dir, peftConfig, err)
}

func scaleOf(alpha float64, r int, rs bool) float64 {
	if rs {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

func (a *Adapter) readPEFTTensors(c peftConfigJSON, tg targets, ranks, alphas []pattern, f *safetensors.File, be tensor.Backend) error {
	a.Scale = scaleOf(c.Alpha, c.R, c.RSLoRA)
	type pair struct{ a, b string }
	mods := map[string]*pair{}
	for _, n := range f.Names() {
		m := peftKey.FindStringSubmatch(n)
		if m == nil {
			return fmt.Errorf("lora: %w: %s: tensor %q is not a LoRA A or B matrix", ErrAdapter, f.Path(), n)
		}
		mod, part := m[1], m[2]
		if mod == "" {
			mod, part = m[3], m[4]
		}
		switch part {
		case "lora_magnitude_vector":
			return fmt.Errorf("lora: %w: %s: tensor %q: DoRA adapters are not supported", model.ErrUnsupported, f.Path(), n)
		case "lora_embedding_A", "lora_embedding_B":
			return fmt.Errorf("lora: %w: %s: tensor %q: LoRA on embedding tables is not supported", model.ErrUnsupported, f.Path(), n)
		}
		mod = strings.TrimPrefix(mod, "base_model.model.")
		p := mods[mod]
		if p == nil {
			p = &pair{}
			mods[mod] = p
		}
		if part == "lora_A" {
			p.a = n
		} else {
			p.b = n
		}
	}
	type expertPair struct {
		e    int
		a, b *tensor.Array
		name string
		r    int
		s    float64
	}
	banks := map[string][]expertPair{}
	wrapped := map[string][]wrappedPair{}
	for _, mod := range slices.Sorted(maps.Keys(mods)) {
		p := mods[mod]
		if p.a == "" || p.b == "" {
			return fmt.Errorf("lora: %w: %s: module %q has only one of lora_A and lora_B", ErrAdapter, f.Path(), mod)
		}
		if base, depth := unwrapBase(mod); (depth > 0 || !tg.match(mod)) && len(targetedParams(c.TargetParameters, base)) > 0 {
			ia, _ := f.Info(p.a)
			ib, _ := f.Info(p.b)
			if len(ia.Shape) != 2 || len(ib.Shape) != 2 || ia.Shape[0] != ib.Shape[1] {
				return fmt.Errorf("lora: %w: %s: module %q: lora_A %v and lora_B %v (want [r·E, in] and [out, r·E])", ErrAdapter, f.Path(), mod, ia.Shape, ib.Shape)
			}
			wrapped[base] = append(wrapped[base], wrappedPair{mod: mod, depth: depth, a: p.a, b: p.b, rE: ia.Shape[0], in: ia.Shape[1], out: ib.Shape[0]})
			continue
		}
		if !tg.match(mod) {
			return fmt.Errorf("lora: %w: %s: module %q is not among target_modules", ErrAdapter, f.Path(), mod)
		}
		ia, _ := f.Info(p.a)
		ib, _ := f.Info(p.b)
		if len(ia.Shape) != 2 || len(ib.Shape) != 2 || ia.Shape[0] != ib.Shape[1] {
			return fmt.Errorf("lora: %w: %s: module %q: lora_A %v and lora_B %v (want [r, in] and [out, r])", ErrAdapter, f.Path(), mod, ia.Shape, ib.Shape)
		}
		r := ia.Shape[0]
		if want := int(lookup(ranks, mod, float64(c.R))); r != want {
			return fmt.Errorf("lora: %w: %s: module %q has rank %d, the config (r, rank_pattern) says %d", ErrAdapter, f.Path(), mod, r, want)
		}
		s := scaleOf(lookup(alphas, mod, c.Alpha), r, c.RSLoRA)
		A := plain(f, p.a, be) // [r, in]
		B := plain(f, p.b, be) // [out, r]
		if m := expertKey.FindStringSubmatch(mod); m != nil {
			e, _ := strconv.Atoi(m[2])
			key := Relative(model.BankPath(m[1]) + m[3])
			banks[key] = append(banks[key], expertPair{e: e, a: A, b: B, name: mod, r: r, s: s})
			continue
		}
		a.Deltas[Relative(mod)] = &Delta{Name: mod, A: A, B: B, Scale: s, Rank: r, In: ia.Shape[1], Out: ib.Shape[0]}
	}
	// per-expert pairs of one bank stack into [E, r, in] and [E, out, r];
	// experts the adapter leaves out get zero pairs
	for key, ps := range banks {
		E := 0
		for _, p := range ps {
			E = max(E, p.e+1)
		}
		r, s := ps[0].r, ps[0].s
		in, out := ps[0].a.Dim(1), ps[0].b.Dim(0)
		as := make([]*tensor.Array, E)
		bs := make([]*tensor.Array, E)
		var made []*tensor.Array
		for _, p := range ps {
			if p.r != r || p.s != s {
				return fmt.Errorf("lora: %w: %s: experts of %q differ in rank or scale (%s: rank %d scale %g, want %d and %g)", model.ErrUnsupported, f.Path(), key, p.name, p.r, p.s, r, s)
			}
			as[p.e], bs[p.e] = p.a, p.b
		}
		for e := range E {
			if as[e] == nil {
				as[e] = tensor.ZerosLike(ps[0].a)
				bs[e] = tensor.ZerosLike(ps[0].b)
				made = append(made, as[e], bs[e])
			}
		}
		A, B := tensor.Stack(as, 0), tensor.Stack(bs, 0)
		tensor.Detach(A, B)
		for _, p := range ps {
			tensor.Free(p.a, p.b)
		}
		tensor.Free(made...)
		a.Deltas[key] = &Delta{Name: ps[0].name, A: A, B: B, Scale: s, Rank: r, In: in, Out: out, Experts: E}
	}
	for _, base := range slices.Sorted(maps.Keys(wrapped)) {
		if err := a.readWrapped(c, ranks, alphas, f, be, base, wrapped[base]); err != nil {
			return err
		}
	}
	return nil
}

// wrappedPair is one pair of PEFT's target_parameters: LoRA on a raw
// parameter of the module base, whose wrapper sits depth levels inside
// the outermost (PEFT nests one ParamWrapper per parameter of a module:
// base, base.base_layer, …).
type wrappedPair struct {
	mod         string
	depth       int
	a, b        string
	rE, in, out int
}

// unwrapBase strips the ".base_layer" segments PEFT's nested parameter
// wrappers add to a module name and counts them.
func unwrapBase(mod string) (string, int) {
	n := 0
	for strings.HasSuffix(mod, ".base_layer") {
		mod = strings.TrimSuffix(mod, ".base_layer")
		n++
	}
	return mod, n
}

// targetedParams lists the parameters of module mod that target_parameters
// names ("experts.gate_up_proj" names gate_up_proj of every module whose
// name is or ends with ".experts"; a bare "gate_up_proj", as PEFT writes
// for target_modules it maps onto fused experts, that of every module),
// in config order.
func targetedParams(tp []string, mod string) []string {
	var out []string
	for _, t := range tp {
		m, p := "", t
		if i := strings.LastIndexByte(t, '.'); i >= 0 {
			m, p = t[:i], t[i+1:]
		}
		if (m == "" || mod == m || strings.HasSuffix(mod, "."+m)) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// readWrapped reads the pairs PEFT's target_parameters made on the fused
// expert tensors of transformers 5 (module base, "….experts"):
// gate_up_proj [E, 2I, D] (gate rows first) and down_proj [E, D, I], each
// adapted by lora_A [r·E, in] (expert e's rows e·r…) and lora_B [out, r·E]
// (expert e's rank-j column at j·E + e), so that expert e's weight gains
// scale·B_e·A_e. They become the pairs of the banks the model stacks
// (model.BankPath): gate_proj and up_proj (gate_up_proj's B split by rows,
// its A shared) and down_proj. Which pair adapts which parameter is told
// by their shapes (gate_up_proj's input width is down_proj's output, its
// output twice down_proj's input).
func (a *Adapter) readWrapped(c peftConfigJSON, ranks, alphas []pattern, f *safetensors.File, be tensor.Backend, base string, ps []wrappedPair) error {
	params := targetedParams(c.TargetParameters, base)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("lora: %w: %s: target_parameters of %q: %s", model.ErrUnsupported, f.Path(), base, fmt.Sprintf(format, args...))
	}
	if !strings.HasSuffix(base, ".experts") {
		return fail("only the fused expert tensors of a module named experts are supported")
	}
	for _, p := range params {
		if p != "gate_up_proj" && p != "down_proj" {
			return fail("parameter %q (only gate_up_proj and down_proj are supported)", p)
		}
	}
	if len(ps) > len(params) {
		return fail("%d pairs for the %d parameters %v", len(ps), len(params), params)
	}
	byParam := map[string]wrappedPair{}
	switch {
	case len(ps) == 1 && len(params) == 1:
		byParam[params[0]] = ps[0]
	case len(ps) == 2:
		x, y := ps[0], ps[1]
		xgu := x.in == y.out && x.out == 2*y.in
		ygu := y.in == x.out && y.out == 2*x.in
		switch {
		case xgu && !ygu:
			byParam["gate_up_proj"], byParam["down_proj"] = x, y
		case ygu && !xgu:
			byParam["gate_up_proj"], byParam["down_proj"] = y, x
		default:
			return fail("pairs %s [%d → %d] and %s [%d → %d] do not tell gate_up_proj from down_proj", x.mod, x.in, x.out, y.mod, y.in, y.out)
		}
	default:
		return fail("%d pairs for the parameters %v", len(ps), params)
	}
	block := strings.TrimSuffix(base, ".experts")
	for _, param := range slices.Sorted(maps.Keys(byParam)) {
		p := byParam[param]
		key := base + "." + param
		r := int(lookup(ranks, key, float64(c.R)))
		if r <= 0 || p.rE%r != 0 {
			return fmt.Errorf("lora: %w: %s: %s: lora_A has %d rows, not a multiple of the rank %d the config (r, rank_pattern) gives", ErrAdapter, f.Path(), p.mod, p.rE, r)
		}
		E := p.rE / r
		s := scaleOf(lookup(alphas, key, c.Alpha), r, c.RSLoRA)
		A := plain(f, p.a, be) // [r·E, in]
		B := plain(f, p.b, be) // [out, r·E]
		var out map[string]*Delta
		err := tensor.Try(func() {
			sc := tensor.NewScope()
			defer sc.Close()
			ae := tensor.Reshape(A, E, r, p.in)                                        // [E, r, in]
			be3 := tensor.Transpose(tensor.Reshape(B, p.out, r, E), []int{2, 0, 1}...) // [E, out, r]
			keep := func(x *tensor.Array) *tensor.Array { x = tensor.Contiguous(x); sc.Keep(x); tensor.Detach(x); return x }
			mk := func(b *tensor.Array, out int) *Delta {
				return &Delta{Name: key, A: keep(ae), B: keep(b), Scale: s, Rank: r, In: p.in, Out: out, Experts: E}
			}
			out = map[string]*Delta{}
			if param == "down_proj" {
				out["down_proj"] = mk(be3, p.out)
				return
			}
			if p.out%2 != 0 {
				panic(&tensor.Error{Op: "lora.Load", Err: fmt.Errorf("%w: %s: gate_up_proj's output width %d is odd", ErrAdapter, p.mod, p.out)})
			}
			h := p.out / 2
			out["gate_proj"] = mk(tensor.SliceAxis(be3, 1, 0, h), h)
			out["up_proj"] = mk(tensor.SliceAxis(be3, 1, h, p.out), h)
		})
		tensor.Free(A, B)
		if err != nil {
			return err
		}
		for proj, d := range out {
			a.Deltas[Relative(model.BankPath(block)+proj)] = d
		}
	}
	return nil
}

// transposed reads a stored [m, n] matrix as a contiguous [n, m] array
// (mlx-lm's lora_a [in, r] becomes [r, in], its lora_b [r, out] [out, r]).
func transposed(f *safetensors.File, name string, be tensor.Backend) *tensor.Array {
	x, err := f.Array(name, be, true)
	if err != nil {
		panic(&tensor.Error{Op: "lora.Load", Err: err})
	}
	checkFloat(f, name, x)
	t := tensor.Transpose(x)
	c := tensor.Contiguous(t)
	tensor.Detach(c)
	tensor.Free(x, t)
	return c
}

func checkFloat(f *safetensors.File, name string, x *tensor.Array) {
	if !x.DType().IsFloat() {
		dt := x.DType()
		x.Free()
		panic(&tensor.Error{Op: "lora.Load", Err: fmt.Errorf("%w: %s: tensor %q has dtype %s, want a float type", ErrAdapter, f.Path(), name, dt)})
	}
}

// mlxConfigJSON is mlx-lm's adapter_config.json, the parts read here.
type mlxConfigJSON struct {
	FineTuneType string `json:"fine_tune_type"`
	UseDoRA      bool   `json:"use_dora"`
	Params       *struct {
		Rank  int      `json:"rank"`
		Scale *float64 `json:"scale"`
		Keys  []string `json:"keys"`
	} `json:"lora_parameters"`
}

func (a *Adapter) readMLX(raw []byte, f *safetensors.File, be tensor.Backend) error {
	var c mlxConfigJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("lora: %w: %s: %s: %v", ErrAdapter, a.Dir, peftConfig, err)
	}
	switch {
	case c.FineTuneType == "dora" || c.UseDoRA:
		return fmt.Errorf("lora: %w: %s: fine_tune_type dora: DoRA adapters are not supported", model.ErrUnsupported, a.Dir)
	case c.FineTuneType != "" && c.FineTuneType != "lora":
		return fmt.Errorf("lora: %w: %s: fine_tune_type %q (only lora adapters are mounted; a full fine-tune is a checkpoint)", model.ErrUnsupported, a.Dir, c.FineTuneType)
	case c.Params == nil || c.Params.Scale == nil:
		return fmt.Errorf("lora: %w: %s: %s has no lora_parameters.scale", ErrAdapter, a.Dir, peftConfig)
	}
	a.Scale = *c.Params.Scale
	type pair struct{ a, b string }
	mods := map[string]*pair{}
	for _, n := range f.Names() {
		i := strings.LastIndexByte(n, '.')
		mod, part := n[:max(i, 0)], n[i+1:]
		switch part {
		case "lora_a", "lora_b":
		case "m":
			return fmt.Errorf("lora: %w: %s: tensor %q: DoRA adapters are not supported", model.ErrUnsupported, f.Path(), n)
		default:
			return fmt.Errorf("lora: %w: %s: tensor %q is not a LoRA lora_a or lora_b matrix", ErrAdapter, f.Path(), n)
		}
		p := mods[mod]
		if p == nil {
			p = &pair{}
			mods[mod] = p
		}
		if part == "lora_a" {
			p.a = n
		} else {
			p.b = n
		}
	}
	for _, mod := range slices.Sorted(maps.Keys(mods)) {
		p := mods[mod]
		if p.a == "" || p.b == "" {
			return fmt.Errorf("lora: %w: %s: module %q has only one of lora_a and lora_b", ErrAdapter, f.Path(), mod)
		}
		ia, _ := f.Info(p.a)
		ib, _ := f.Info(p.b)
		d := &Delta{Name: mod, Scale: a.Scale}
		switch {
		case len(ia.Shape) == 2 && len(ib.Shape) == 2 && ia.Shape[1] == ib.Shape[0]:
			// LoRALinear: lora_a [in, r], lora_b [r, out], as used
			d.Rank, d.In, d.Out = ia.Shape[1], ia.Shape[0], ib.Shape[1]
			d.A, d.B = transposed(f, p.a, be), transposed(f, p.b, be)
		case len(ia.Shape) == 2 && len(ib.Shape) == 3 && ib.Shape[2] > 0 && ia.Shape[0] == ib.Shape[0]*ib.Shape[2]:
			// LoRASwitchLinear: lora_a [E·r, in] (expert e's rows e·r…),
			// lora_b [E, out, r]
			E, r := ib.Shape[0], ib.Shape[2]
			d.Rank, d.In, d.Out, d.Experts = r, ia.Shape[1], ib.Shape[1], E
			d.A = reshaped(f, p.a, be, []int{E, r, ia.Shape[1]}) // [E, r, in]
			d.B = plain(f, p.b, be)                              // [E, out, r]
		default:
			return fmt.Errorf("lora: %w: %s: module %q: lora_a %v and lora_b %v (want [in, r] and [r, out], or [E·r, in] and [E, out, r])", ErrAdapter, f.Path(), mod, ia.Shape, ib.Shape)
		}
		if c.Params.Rank > 0 && d.Rank != c.Params.Rank {
			tensor.Free(d.A, d.B)
			return fmt.Errorf("lora: %w: %s: module %q has rank %d, lora_parameters.rank says %d", ErrAdapter, f.Path(), mod, d.Rank, c.Params.Rank)
		}
		a.Deltas[Relative(mod)] = d
	}
	return nil
}

// plain reads a stored tensor as is.
func plain(f *safetensors.File, name string, be tensor.Backend) *tensor.Array {
	x, err := f.Array(name, be, true)
	if err != nil {
		panic(&tensor.Error{Op: "lora.Load", Err: err})
	}
	checkFloat(f, name, x)
	tensor.Detach(x)
	return x
}

// reshaped reads a stored tensor as a contiguous array of shape.
func reshaped(f *safetensors.File, name string, be tensor.Backend, shape []int) *tensor.Array {
	x := plain(f, name, be)
	sc := tensor.NewScope()
	defer sc.Close()
	out := sc.Keep(tensor.Contiguous(tensor.Reshape(x, shape...)))
	tensor.Detach(out)
	x.Free()
	return out
}
