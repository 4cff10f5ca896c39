package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// GPTQOptions tunes GPTQ quantization (Convert with Method "gptq").
type GPTQOptions struct {
	// Damp is added to the Gram matrix's diagonal as a fraction of the
	// diagonal's mean, so that inputs the calibration never exercised do
	// not make the inverse blow up (default 0.01).
	Damp float64
	// BlockSize is the number of columns quantized before their error is
	// pushed into the remaining columns in one pass (default 128, rounded
	// to a multiple of the group size).
	BlockSize int
	// RangeSteps is how many shrunk ranges (100%, 99%, … of a group's
	// min–max span, about its centre) are tried for each group's scale and
	// bias, keeping the one with the least squared error; 0 or 1 keeps
	// MLX's plain min–max grid.
	RangeSteps int
	// TiedEmbeddings also runs GPTQ on an embedding table that doubles as
	// the output head, against the head's inputs. Off by default: the
	// table is also looked up row by row as the model's input, where the
	// head's error compensation only adds error (measured on the demo
	// model: worse logits than plain rounding of the table).
	TiedEmbeddings bool
}

func (o GPTQOptions) withDefaults(groupSize int) GPTQOptions {
	if o.Damp <= 0 {
		o.Damp = 0.01
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 128
	}
	o.BlockSize = max(groupSize, o.BlockSize/groupSize*groupSize)
	return o
}

// gptqPlan is the inverse-Hessian factor GPTQ walks along: U upper
// triangular with UᵀU = (H + damp·I)⁻¹, where H is the mean Gram matrix of
// the layer's inputs. Columns the calibration never reached (zero diagonal)
// are marked dead: their weights do not affect the outputs seen, so they are
// quantized as they are and get no error feedback.
type gptqPlan struct {
	n    int
	u    []float64 // n×n row-major, upper triangle used
	dead []bool
}

// newGPTQPlan factors the Gram matrix g. It uses that the upper Cholesky
// factor of H⁻¹ is P·L⁻¹·P, where P reverses the order of the columns and
// L is the lower Cholesky factor of P·H·P: one factorisation and one
// triangular inverse, no explicit H⁻¹.
func newGPTQPlan(g *Gram, damp float64) (*gptqPlan, error) {
	n := g.In
	if g.Rows == 0 {
		return nil, fmt.Errorf("no calibration rows")
	}
	h := make([]float64, n*n)
	dead := make([]bool, n)
	mean := 0.0
	for i := range n {
		for j := range n {
			h[i*n+j] = g.Sum[i*n+j] / float64(g.Rows)
		}
		if h[i*n+i] <= 0 {
			dead[i] = true
			h[i*n+i] = 1
		}
		mean += h[i*n+i]
	}
	mean /= float64(n)
	for i := range n {
		h[i*n+i] += damp * mean
	}
	// r = P·H·P, factored in place into its lower Cholesky factor.
	r := make([]float64, n*n)
	for i := range n {
		for j := range n {
			r[i*n+j] = h[(n-1-i)*n+(n-1-j)]
		}
	}
	for j := range n {
		s := r[j*n+j]
		rj := r[j*n : j*n+j]
		for _, v := range rj {
			s -= v * v
		}
		if s <= 0 || math.IsNaN(s) {
			return nil, fmt.Errorf("Gram matrix is not positive definite (column %d); raise the dampening", n-1-j)
		}
		d := math.Sqrt(s)
		r[j*n+j] = d
		for i := j + 1; i < n; i++ {
			ri := r[i*n : i*n+j]
			s := r[i*n+j]
			for k, v := range ri {
				s -= v * rj[k]
			}
			r[i*n+j] = s / d
		}
		for k := j + 1; k < n; k++ {
			r[j*n+k] = 0
		}
	}
	// inv = L⁻¹ (lower), by forward substitution column by column.
	inv := make([]float64, n*n)
	for j := range n {
		inv[j*n+j] = 1 / r[j*n+j]
		for i := j + 1; i < n; i++ {
			s := 0.0
			for k := j; k < i; k++ {
				s += r[i*n+k] * inv[k*n+j]
			}
			inv[i*n+j] = -s / r[i*n+i]
		}
	}
	u := make([]float64, n*n)
	for i := range n {
		for j := i; j < n; j++ {
			u[i*n+j] = inv[(n-1-i)*n+(n-1-j)]
		}
	}
	return &gptqPlan{n: n, u: u, dead: dead}, nil
}

// gptqQuantize quantizes w [out, in] (row-major) in MLX's affine format,
// choosing codes column by column so that each column's rounding error is
// compensated in the columns not yet quantized, weighted by how the
// calibration inputs correlate (GPTQ, Frantar et al. 2022). Each group's
// scale and bias are fixed when its first column is reached, rounded to dt
// (the type they are stored in) before any code is chosen, so the stored
// checkpoint dequantizes to exactly what the error feedback assumed.
func gptqQuantize(w []float32, out, in int, plan *gptqPlan, spec QuantSpec, dt tensor.DType, opts GPTQOptions) (codes []uint8, scales, biases []float32) {
	gs, bits := spec.GroupSize, spec.Bits
	opts = opts.withDefaults(gs)
	ng := in / gs
	codes = make([]uint8, out*in)
	scales = make([]float32, out*ng)
	biases = make([]float32, out*ng)
	wd := make([]float64, out*in)
	for i, v := range w {
		wd[i] = float64(v)
	}
	u := plan.u
	bs := opts.BlockSize
	errs := make([]float64, out*bs)
	group := make([]float64, gs)
	for b0 := 0; b0 < in; b0 += bs {
		b1 := min(b0+bs, in)
		for c := b0; c < b1; c++ {
			if c%gs == 0 {
				g := c / gs
				for r := range out {
					copy(group, wd[r*in+c:r*in+c+gs])
					s, z := groupGrid(group, bits, dt, opts.RangeSteps)
					scales[r*ng+g], biases[r*ng+g] = s, z
				}
			}
			g := c / gs
			d := u[c*in+c]
			for r := range out {
				s, z := float64(scales[r*ng+g]), float64(biases[r*ng+g])
				v := wd[r*in+c]
				q := quantCode(v, s, z, bits)
				codes[r*in+c] = q
				e := 0.0
				if !plan.dead[c] {
					e = (v - (s*float64(q) + z)) / d
				}
				errs[r*bs+(c-b0)] = e
				if e == 0 {
					continue
				}
				row := wd[r*in : r*in+b1]
				uc := u[c*in : c*in+b1]
				for j := c + 1; j < b1; j++ {
					row[j] -= e * uc[j]
				}
			}
		}
		// lazy update of the columns after the block: W[:, b1:] -= E·U[b0:b1, b1:]
		if b1 < in {
			for r := range out {
				row := wd[r*in+b1 : r*in+in]
				for k := b0; k < b1; k++ {
					e := errs[r*bs+(k-b0)]
					if e == 0 {
						continue
					}
					uk := u[k*in+b1 : k*in+in]
					for j, x := range uk {
						row[j] -= e * x
					}
				}
			}
		}
	}
	return codes, scales, biases
}

// quantCode is the code of v on the grid z + s·q, q ∈ [0, 2^bits − 1].
func quantCode(v, s, z float64, bits int) uint8 {
	top := float64(int(1)<<bits - 1)
	q := math.RoundToEven((v - z) / s)
	return uint8(min(max(q, 0), top))
}

// groupGrid picks one group's scale and bias: MLX's min–max grid, or with
// steps > 1 the best (least squared error) of ranges shrunk about the
// group's centre to 100%, 99%, … of its span. Both are rounded to dt.
func groupGrid(v []float64, bits int, dt tensor.DType, steps int) (scale, bias float32) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	top := float64(int(1)<<bits - 1)
	grid := func(p float64) (float32, float32) {
		c, half := (lo+hi)/2, (hi-lo)/2*p
		s := max(2*half/top, 1e-7)
		return roundFloat(dt, float32(s)), roundFloat(dt, float32(c-half))
	}
	scale, bias = grid(1)
	if steps <= 1 {
		return scale, bias
	}
	sqErr := func(s, z float32) float64 {
		e := 0.0
		for _, x := range v {
			q := quantCode(x, float64(s), float64(z), bits)
			d := x - (float64(s)*float64(q) + float64(z))
			e += d * d
		}
		return e
	}
	best := sqErr(scale, bias)
	for i := 1; i < steps; i++ {
		s, z := grid(1 - 0.01*float64(i))
		if e := sqErr(s, z); e < best {
			best, scale, bias = e, s, z
		}
	}
	return scale, bias
}

// roundFloat rounds x to the nearest value of the float type dt.
func roundFloat(dt tensor.DType, x float32) float32 {
	switch dt {
	case tensor.BFloat16:
		return tensor.BF16ToF32(tensor.F32ToBF16(x))
	case tensor.Float16:
		return tensor.F16ToF32(tensor.F32ToF16(x))
	}
	return x
}

// gptqDecide says how Convert will store a module: its spec, the float
// type of its scales and biases, and whether it is quantized at all.
type gptqDecide func(mod string, shape []int, stored tensor.DType) (QuantSpec, tensor.DType, bool)

// runGPTQ quantizes with GPTQ every dense layer of the model in src that
// the calibration reaches, computing in float32, one depth at a time (the
// paper's sequential scheme): the Gram matrices of layer d are collected
// with every shallower layer — and the embedding table, rounded as Convert
// will store it — already replaced by its quantized weights, so each layer
// compensates for the error it is actually fed. Each module's packed
// weight, scales and biases go into results under its path.
func runGPTQ(src string, opts ConvertOptions, decide gptqDecide, results map[string][3]*tensor.Array) (err error) {
	if len(opts.Calibration) == 0 {
		return fmt.Errorf("model: convert: method %q needs calibration sequences", opts.Method)
	}
	m, err := Load(src, &LoadOptions{Backend: opts.Backend, DType: tensor.Float32})
	if err != nil {
		return fmt.Errorf("model: convert: calibration: %w", err)
	}
	defer m.Close()
	l := m.(*Loaded)
	var made []*tensor.Array // dequantized stand-ins, freed at the end
	defer func() { tensor.Free(made...) }()
	defer tensor.Recover(&err)
	be := l.w.Backend()
	stored := func(mod string) tensor.DType {
		info, err := l.set.Info(mod + ".weight")
		if err != nil {
			panic(&tensor.Error{Op: "convert", Err: err})
		}
		return info.DType
	}
	// rounded stands in the table as Convert will round it (RTN).
	rounded := func(w *tensor.Array, spec QuantSpec, dt tensor.DType) *tensor.Array {
		c := tensor.AsType(w, dt)
		q, s, b := tensor.Quantize(c, spec.GroupSize, spec.Bits)
		d := tensor.Dequantize(q, s, b, spec.GroupSize, spec.Bits, tensor.Float32)
		tensor.Detach(d)
		tensor.Free(c, q, s, b)
		made = append(made, d)
		return d
	}
	layers := l.info.Layers
	depths := map[int][]string{}
	for mod := range l.w.linears {
		d := moduleDepth(mod, layers)
		depths[d] = append(depths[d], mod)
	}
	for mod, e := range l.w.embeds {
		spec, dt, ok := decide(mod, e.Weight.Shape(), stored(mod))
		if !ok {
			continue
		}
		if opts.GPTQ.TiedEmbeddings {
			depths[layers+1] = append(depths[layers+1], mod)
			continue
		}
		e.Weight = rounded(e.Weight, spec, dt)
	}
	order := make([]int, 0, len(depths))
	for d := range depths {
		order = append(order, d)
	}
	slices.Sort(order)
	for _, d := range order {
		mods := depths[d]
		slices.Sort(mods)
		want := map[string]bool{}
		for _, mod := range mods {
			want[mod] = true
		}
		grams, err := collectGrams(l, opts.Calibration, want)
		if err != nil {
			return err
		}
		plans := map[*Gram]*gptqPlan{}
		for _, mod := range mods {
			weight := func() **tensor.Array {
				if lin, ok := l.w.linears[mod]; ok {
					return &lin.Weight
				}
				return &l.w.embeds[mod].Weight
			}()
			w := *weight
			spec, dt, ok := decide(mod, w.Shape(), stored(mod))
			if !ok {
				continue
			}
			g := grams[mod]
			if g == nil { // not reached by the calibration: plain rounding
				*weight = rounded(w, spec, dt)
				continue
			}
			if plans[g] == nil {
				p, err := newGPTQPlan(g, opts.GPTQ.withDefaults(spec.GroupSize).Damp)
				if err != nil {
					return fmt.Errorf("model: convert: gptq %s: %w", mod, err)
				}
				plans[g] = p
			}
			out, in := w.Dim(0), w.Dim(1)
			codes, s, b := gptqQuantize(w.Float32s(), out, in, plans[g], spec, dt, opts.GPTQ)
			results[mod] = packAffine(be, codes, s, b, out, in, spec, dt)
			deq := make([]float32, out*in)
			ng := in / spec.GroupSize
			for r := range out {
				for c := range in {
					k := r*ng + c/spec.GroupSize
					deq[r*in+c] = s[k]*float32(codes[r*in+c]) + b[k]
				}
			}
			a := tensor.FromBytesOn(be, float32Bytes(deq), []int{out, in}, tensor.Float32, false)
			tensor.Detach(a)
			made = append(made, a)
			*weight = a
		}
	}
	return nil
}

// moduleDepth orders modules for sequential GPTQ: layer i's modules at
// depth i, modules outside the layers before them (input projections)
// or, for the output head, after them.
func moduleDepth(mod string, layers int) int {
	if i := strings.Index(mod, "layers."); i >= 0 {
		rest := mod[i+len("layers."):]
		if j := strings.IndexByte(rest, '.'); j > 0 {
			if n, err := strconv.Atoi(rest[:j]); err == nil {
				return n
			}
		}
	}
	if strings.HasSuffix(mod, "lm_head") {
		return layers
	}
	return -1
}

// packAffine writes codes, scales and biases (already rounded to dt) as
// MLX's packed weight and dt scales and biases on be.
func packAffine(be tensor.Backend, codes []uint8, scales, biases []float32, out, in int, spec QuantSpec, dt tensor.DType) [3]*tensor.Array {
	wpr := tensor.PackedDim(in, spec.Bits)
	words := make([]uint32, out*wpr)
	for r := range out {
		tensor.PackCodes(words[r*wpr:(r+1)*wpr], codes[r*in:(r+1)*in], spec.Bits)
	}
	raw := make([]byte, 4*len(words))
	for i, v := range words {
		binary.LittleEndian.PutUint32(raw[4*i:], v)
	}
	wq := tensor.FromBytesOn(be, raw, []int{out, wpr}, tensor.Uint32, false)
	grid := func(v []float32) *tensor.Array {
		f := tensor.FromBytesOn(be, float32Bytes(v), []int{out, in / spec.GroupSize}, tensor.Float32, false)
		if dt == tensor.Float32 {
			return f
		}
		c := tensor.AsType(f, dt) // exact: the values were rounded to dt
		f.Free()
		return c
	}
	r := [3]*tensor.Array{wq, grid(scales), grid(biases)}
	tensor.Detach(r[:]...)
	return r
}

// float32Bytes is v as little-endian bytes.
func float32Bytes(v []float32) []byte {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return raw
}
