package quant

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
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
// triangular inverse, no explicit H⁻¹, computed in float32 (as GPTQ
// implementations do) mostly as matrix products.
func newGPTQPlan(g *gram, damp float64) (*gptqPlan, error) {
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
	// r = P·H·P, factored into its lower Cholesky factor L and L⁻¹.
	r := make([]float32, n*n)
	for i := range n {
		for j := range n {
			r[i*n+j] = float32(h[(n-1-i)*n+(n-1-j)])
		}
	}
	var inv []float32
	err := tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		_, li := cholInv(tensor.FromFloat32(r, []int{n, n}, tensor.Float32))
		inv = li.Float32s()
	})
	if err != nil {
		return nil, err
	}
	u := make([]float64, n*n)
	for i := range n {
		for j := i; j < n; j++ {
			u[i*n+j] = float64(inv[(n-1-i)*n+(n-1-j)])
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
func gptqQuantize(w []float32, out, in int, plan *gptqPlan, spec tensor.QuantSpec, dt tensor.DType, opts GPTQOptions) (codes []uint8, scales, biases []float32) {
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
	errs := make([]float32, out*bs)
	var ut *tensor.Array // U in float32 for the lazy updates
	defer func() {
		if ut != nil {
			ut.Free()
		}
	}()
	for b0 := 0; b0 < in; b0 += bs {
		b1 := min(b0+bs, in)
		// rows are independent given U: quantize the block's columns row by row
		parallelRows(out, func(r0, r1 int) {
			group := make([]float64, gs)
			for r := r0; r < r1; r++ {
				row := wd[r*in : r*in+in]
				for c := b0; c < b1; c++ {
					g := c / gs
					if c%gs == 0 {
						copy(group, row[c:c+gs])
						scales[r*ng+g], biases[r*ng+g] = groupGrid(group, bits, dt)
					}
					s, z := float64(scales[r*ng+g]), float64(biases[r*ng+g])
					v := row[c]
					q := quantCode(v, s, z, bits)
					codes[r*in+c] = q
					e := 0.0
					if !plan.dead[c] {
						e = (v - (s*float64(q) + z)) / u[c*in+c]
					}
					errs[r*bs+(c-b0)] = float32(e)
					if e == 0 {
						continue
					}
					uc := u[c*in : c*in+b1]
					for j := c + 1; j < b1; j++ {
						row[j] -= e * uc[j]
					}
				}
			}
		})
		if b1 == in {
			break
		}
		// lazy update of the columns after the block: W[:, b1:] -= E·U[b0:b1, b1:]
		if ut == nil {
			u32 := make([]float32, in*in)
			for i, x := range u {
				u32[i] = float32(x)
			}
			ut = tensor.FromFloat32(u32, []int{in, in}, tensor.Float32)
			tensor.Detach(ut)
		}
		var d []float32
		func() {
			sc := tensor.NewScope()
			defer sc.Close()
			e := tensor.FromFloat32(errs, []int{out, bs}, tensor.Float32) // a full block: only the last can be short
			d = tensor.Matmul(e, tensor.Slice(ut, []int{b0, b1}, []int{b1, in}, nil)).Float32s()
		}()
		rest := in - b1
		parallelRows(out, func(r0, r1 int) {
			for r := r0; r < r1; r++ {
				row := wd[r*in+b1 : r*in+in]
				dr := d[r*rest : (r+1)*rest]
				for j, x := range dr {
					row[j] -= float64(x)
				}
			}
		})
	}
	return codes, scales, biases
}

// quantCode is the code of v on the grid z + s·q, q ∈ [0, 2^bits − 1].
func quantCode(v, s, z float64, bits int) uint8 {
	top := float64(int(1)<<bits - 1)
	q := math.RoundToEven((v - z) / s)
	return uint8(min(max(q, 0), top))
}

// groupGrid picks one group's scale and bias: its min–max grid, both
// rounded to dt (the type they are stored in), so that codes are chosen
// against exactly what the checkpoint will dequantize with.
func groupGrid(v []float64, bits int, dt tensor.DType) (scale, bias float32) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	s := max((hi-lo)/float64(int(1)<<bits-1), 1e-7)
	return tensor.RoundTo(float32(s), dt), tensor.RoundTo(float32(lo), dt)
}

// gptqDecide says how Convert will store a module: its spec, the float
// type of its scales and biases, and whether it is quantized at all.
type gptqDecide func(mod string, shape []int, stored tensor.DType) (tensor.QuantSpec, tensor.DType, bool)

// runGPTQ quantizes with GPTQ every dense layer of the model in src that
// the calibration reaches, computing in float32, one depth at a time (the
// paper's sequential scheme): the Gram matrices of layer d are collected
// with every shallower layer — and the embedding table, rounded as Convert
// will store it — already replaced by its quantized weights, so each layer
// compensates for the error it is actually fed. Each module's packed
// weight, scales and biases go into results under its path.
func runGPTQ(src string, opts ConvertOptions, decide gptqDecide, results map[string][3]*tensor.Array) (err error) {
	if len(opts.Calibration) == 0 {
		return fmt.Errorf("quant: convert: method %q needs calibration sequences", opts.Method)
	}
	c := newCalibrator()
	m, err := model.Load(src, &model.LoadOptions{Backend: opts.Backend, DType: tensor.Float32, Wrap: c})
	if err != nil {
		return fmt.Errorf("quant: convert: calibration: %w", err)
	}
	defer m.Close()
	l := m.(*model.Loaded)
	set, err := safetensors.OpenDir(src)
	if err != nil {
		return fmt.Errorf("quant: convert: %w", err)
	}
	defer set.Close()
	var made []*tensor.Array // dequantized stand-ins, freed at the end
	defer func() { tensor.Free(made...) }()
	defer tensor.Recover(&err)
	be := l.Backend()
	stored := func(mod string) tensor.DType {
		info, err := set.Info(c.source[mod])
		if err != nil {
			panic(&tensor.Error{Op: "convert", Err: err})
		}
		return info.DType
	}
	keep := func(a *tensor.Array) *tensor.Array {
		tensor.Detach(a)
		made = append(made, a)
		return a
	}
	layers := l.Info().Layers
	c.layers = layers
	depths := map[int][]string{}
	for mod := range c.linears {
		depths[moduleDepth(mod, layers)] = append(depths[moduleDepth(mod, layers)], mod)
	}
	for mod := range c.banks {
		depths[moduleDepth(mod, layers)] = append(depths[moduleDepth(mod, layers)], mod)
	}
	for mod, e := range c.embeds {
		spec, dt, ok := decide(mod, e.Weight.Shape(), stored(mod))
		if !ok {
			continue
		}
		if opts.GPTQ.TiedEmbeddings {
			depths[layers+1] = append(depths[layers+1], mod)
			continue
		}
		// the table stands in as Convert will round it
		t := rtnMatrix(e.Weight, spec, dt)
		e.Weight = keep(t.deq)
		tensor.Free(t.packed[:]...)
	}
	for _, d := range slices.Sorted(maps.Keys(depths)) {
		mods := depths[d]
		slices.Sort(mods)
		want := map[string]bool{}
		for _, mod := range mods {
			want[mod] = true
		}
		grams, err := c.collect(l, opts.Calibration, want, d)
		if err != nil {
			return err
		}
		plans := map[*gram]*gptqPlan{}
		// quantize one [out, in] matrix with its Gram (nil: plain rounding)
		one := func(mod string, w *tensor.Array, g *gram, spec tensor.QuantSpec, dt tensor.DType) quantized {
			if g == nil || g.Rows < g.In {
				// unreached, or seen on fewer rows than inputs (an expert the
				// calibration rarely routes to): the Gram is singular and
				// GPTQ would fit its error to the few rows seen
				return rtnMatrix(w, spec, dt)
			}
			if plans[g] == nil {
				p, err := newGPTQPlan(g, opts.GPTQ.withDefaults(spec.GroupSize).Damp)
				if err != nil {
					panic(&tensor.Error{Op: "convert", Err: fmt.Errorf("gptq %s: %w", mod, err)})
				}
				plans[g] = p
			}
			return gptqMatrix(be, w, plans[g], spec, dt, opts.GPTQ)
		}
		for _, mod := range mods {
			var weight **tensor.Array
			var bank *model.SwitchLinear
			switch {
			case c.linears[mod] != nil:
				weight = &c.linears[mod].Weight
			case c.embeds[mod] != nil:
				weight = &c.embeds[mod].Weight
			default:
				bank = c.banks[mod]
				weight = &bank.Weight
			}
			w := *weight
			spec, dt, ok := decide(mod, w.Shape(), stored(mod))
			if !ok {
				continue
			}
			if bank == nil {
				q := one(mod, w, grams[mod], spec, dt)
				results[mod] = q.packed
				*weight = keep(q.deq)
				continue
			}
			// a bank: each expert with the Gram of the rows routed to it
			var parts [3][]*tensor.Array
			var deqs []*tensor.Array
			for e := range bank.Experts {
				v := tensor.SliceAxis(w, 0, e, e+1)
				we := tensor.Squeeze(v, 0)
				v.Free()
				q := one(expertKey(mod, e), we, grams[expertKey(mod, e)], spec, dt)
				we.Free()
				for i := range parts {
					parts[i] = append(parts[i], q.packed[i])
				}
				deqs = append(deqs, q.deq)
			}
			var stacked [3]*tensor.Array
			for i := range parts {
				stacked[i] = tensor.Stack(parts[i], 0)
				tensor.Detach(stacked[i])
				tensor.Free(parts[i]...)
			}
			results[mod] = stacked
			*weight = keep(tensor.Stack(deqs, 0))
			tensor.Free(deqs...)
		}
	}
	return nil
}

// quantized is one matrix's packed weight, scales and biases, and its
// dequantized float32 values (what the next layers' calibration sees).
type quantized struct {
	packed [3]*tensor.Array
	deq    *tensor.Array
}

// rtnMatrix rounds w [out, in] as Convert does without calibration.
func rtnMatrix(w *tensor.Array, spec tensor.QuantSpec, dt tensor.DType) quantized {
	c := tensor.AsType(w, dt)
	q, s, b := tensor.Quantize(c, spec.GroupSize, spec.Bits)
	c.Free()
	d := tensor.Dequantize(q, s, b, spec.GroupSize, spec.Bits, tensor.Float32)
	tensor.Detach(q, s, b, d)
	return quantized{[3]*tensor.Array{q, s, b}, d}
}

// gptqMatrix quantizes w [out, in] with GPTQ against plan.
func gptqMatrix(be tensor.Backend, w *tensor.Array, plan *gptqPlan, spec tensor.QuantSpec, dt tensor.DType, opts GPTQOptions) quantized {
	out, in := w.Dim(0), w.Dim(1)
	codes, s, b := gptqQuantize(w.Float32s(), out, in, plan, spec, dt, opts)
	deq := make([]float32, out*in)
	ng := in / spec.GroupSize
	for r := range out {
		for c := range in {
			k := r*ng + c/spec.GroupSize
			deq[r*in+c] = s[k]*float32(codes[r*in+c]) + b[k]
		}
	}
	d := tensor.FromBytesOn(be, float32Bytes(deq), []int{out, in}, tensor.Float32, false)
	tensor.Detach(d)
	return quantized{packAffine(be, codes, s, b, out, in, spec, dt), d}
}

// packAffine writes codes, scales and biases (already rounded to dt) as
// MLX's packed weight and dt scales and biases on be.
func packAffine(be tensor.Backend, codes []uint8, scales, biases []float32, out, in int, spec tensor.QuantSpec, dt tensor.DType) [3]*tensor.Array {
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

// cholLeaf is the size at or below which cholInv factors directly.
const cholLeaf = 128

// cholInv returns the lower Cholesky factor L of the symmetric positive
// definite float32 matrix a and L⁻¹. It recurses on halves:
//
//	L = [L₁₁ 0; L₂₁ L₂₂], L₂₁ = A₂₁·L₁₁⁻ᵀ, L₂₂ = chol(A₂₂ − L₂₁·L₂₁ᵀ),
//	L⁻¹ = [L₁₁⁻¹ 0; −L₂₂⁻¹·L₂₁·L₁₁⁻¹  L₂₂⁻¹]
//
// so that ~2n³/3 of its flops are matrix products on the backend; blocks
// of cholLeaf or less are factored in float64 in Go. It panics with a
// *tensor.Error when a is not positive definite.
func cholInv(a *tensor.Array) (l, inv *tensor.Array) {
	n := a.Dim(0)
	if n <= cholLeaf {
		v := a.Float32s()
		f := make([]float64, n*n)
		for i, x := range v {
			f[i] = float64(x)
		}
		if j := cholLower(f, n); j >= 0 {
			panic(&tensor.Error{Op: "gptq", Err: fmt.Errorf("Gram matrix is not positive definite (pivot %d); raise the dampening", j)})
		}
		fi := invLower(f, n)
		lo, io := make([]float32, n*n), make([]float32, n*n)
		for i := range f {
			lo[i], io[i] = float32(f[i]), float32(fi[i])
		}
		return tensor.FromFloat32(lo, []int{n, n}, tensor.Float32), tensor.FromFloat32(io, []int{n, n}, tensor.Float32)
	}
	h := (n/2 + 63) / 64 * 64
	a11 := tensor.Slice(a, []int{0, 0}, []int{h, h}, nil)
	a21 := tensor.Slice(a, []int{h, 0}, []int{n, h}, nil)
	a22 := tensor.Slice(a, []int{h, h}, []int{n, n}, nil)
	l11, i11 := cholInv(a11)
	l21 := tensor.Matmul(a21, tensor.Transpose(i11))
	s := tensor.Sub(a22, tensor.Matmul(l21, tensor.Transpose(l21)))
	l22, i22 := cholInv(s)
	i21 := tensor.Neg(tensor.Matmul(i22, tensor.Matmul(l21, i11)))
	zero := tensor.Zeros([]int{h, n - h}, tensor.Float32)
	l = tensor.Concatenate([]*tensor.Array{
		tensor.Concatenate([]*tensor.Array{l11, zero}, 1),
		tensor.Concatenate([]*tensor.Array{l21, l22}, 1)}, 0)
	inv = tensor.Concatenate([]*tensor.Array{
		tensor.Concatenate([]*tensor.Array{i11, zero}, 1),
		tensor.Concatenate([]*tensor.Array{i21, i22}, 1)}, 0)
	return l, inv
}

// cholLower factors the n×n row-major f in place into its lower Cholesky
// factor (zeroing the upper triangle). It returns -1, or the first pivot
// that is not positive.
func cholLower(f []float64, n int) int {
	for j := range n {
		s := f[j*n+j]
		rj := f[j*n : j*n+j]
		for _, v := range rj {
			s -= v * v
		}
		if s <= 0 || math.IsNaN(s) {
			return j
		}
		d := math.Sqrt(s)
		f[j*n+j] = d
		for i := j + 1; i < n; i++ {
			ri := f[i*n : i*n+j]
			s := f[i*n+j]
			for k, v := range ri {
				s -= v * rj[k]
			}
			f[i*n+j] = s / d
		}
		for k := j + 1; k < n; k++ {
			f[j*n+k] = 0
		}
	}
	return -1
}

// invLower inverts the n×n lower-triangular l by forward substitution.
func invLower(l []float64, n int) []float64 {
	inv := make([]float64, n*n)
	for j := range n {
		inv[j*n+j] = 1 / l[j*n+j]
		for i := j + 1; i < n; i++ {
			s := 0.0
			for k := j; k < i; k++ {
				s += l[i*n+k] * inv[k*n+j]
			}
			inv[i*n+j] = -s / l[i*n+i]
		}
	}
	return inv
}

// parallelRows splits [0, n) into one contiguous range per CPU and runs f
// on each concurrently.
func parallelRows(n int, f func(r0, r1 int)) {
	k := min(runtime.GOMAXPROCS(0), n)
	if k <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range k {
		r0, r1 := i*n/k, (i+1)*n/k
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(r0, r1)
		}()
	}
	wg.Wait()
}
