package kv

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/mlxgo/mlxgo/tensor"
)

// TurboQuant cache kinds.
const (
	KindTurbo            Kind = "TurboQuantKVCache"
	KindTurboRotating    Kind = "TurboQuantRotatingKVCache"
	KindTurboQJL         Kind = "TurboQuantQJLKVCache"
	KindTurboQJLRotating Kind = "TurboQuantQJLRotatingKVCache"
)

// turboKind is the kind of a TurboQuant cache of the scheme.
func (s TurboSpec) turboKind(rotating bool) Kind {
	switch {
	case s.QJL && rotating:
		return KindTurboQJLRotating
	case s.QJL:
		return KindTurboQJL
	case rotating:
		return KindTurboRotating
	}
	return KindTurbo
}

// turboCacheFor makes an empty TurboQuant cache of a saved kind.
func turboCacheFor(kind Kind, maxSize, keep, keyBits, valueBits int) (Cache, bool, error) {
	spec := TurboSpec{KeyBits: keyBits, ValueBits: valueBits, QJL: kind == KindTurboQJL || kind == KindTurboQJLRotating}
	switch kind {
	case KindTurbo, KindTurboQJL:
		c, err := NewTurboQuantKVCache(spec)
		return c, true, err
	case KindTurboRotating, KindTurboQJLRotating:
		c, err := NewTurboQuantRotatingKVCache(maxSize, keep, spec)
		return c, true, err
	}
	return nil, false, nil
}

// TurboKV is what attention reads from a TurboQuant cache: each token's
// coded key and value bytes per KV head, [B, Hkv, T, KeyBytes] and
// [B, Hkv, T, ValueBytes] uint8 in tensor.TurboLayout's format. Values
// are in the rotated domain; attention transforms its output back.
type TurboKV struct {
	Keys, Values     *tensor.Array
	Spec             TurboSpec
	KeyDim, ValueDim int
}

// Layout is the tensor-level description of the coded rows.
func (t *TurboKV) Layout() tensor.TurboLayout {
	return tensor.TurboLayout{KeyBits: t.Spec.KeyBits, ValueBits: t.Spec.ValueBits, KeyDim: t.KeyDim, ValueDim: t.ValueDim,
		Group: TurboGroup, Levels: turboBooks[t.Spec.ValueBits].levels32, Signs: turboSigns32[:t.ValueDim]}
}

var turboSigns32 = func() []float32 {
	out := make([]float32, len(turboSigns))
	for i, s := range turboSigns {
		out[i] = float32(s)
	}
	return out
}()

// TurboQuantKVCache is KVCache storing TurboQuant codes (TurboSpec):
// 200 bytes per token and KV head at head dim 128 with k8v3, against 512
// in bfloat16. Its buffers are KVCache's (same growth, trimming, states),
// holding coded bytes instead of keys and values.
type TurboQuantKVCache struct {
	linear
	spec TurboSpec
}

// TurboQuantRotatingKVCache is RotatingKVCache storing TurboQuant codes,
// for sliding-window layers.
type TurboQuantRotatingKVCache struct {
	rotating
	spec TurboSpec
}

// NewTurboQuantKVCache returns an empty TurboQuant cache; the head dims
// written to it must pass spec.Check.
func NewTurboQuantKVCache(spec TurboSpec) (*TurboQuantKVCache, error) {
	if err := spec.valid(); err != nil {
		return nil, err
	}
	return &TurboQuantKVCache{linear: linear{buffers{kind: spec.turboKind(false)}}, spec: spec}, nil
}

// NewTurboQuantRotatingKVCache returns an empty TurboQuant sliding-window
// cache of maxSize tokens whose first keep tokens are never evicted.
func NewTurboQuantRotatingKVCache(maxSize, keep int, spec TurboSpec) (*TurboQuantRotatingKVCache, error) {
	if err := spec.valid(); err != nil {
		return nil, err
	}
	if maxSize <= 0 || keep < 0 || keep >= maxSize {
		return nil, fmt.Errorf("kv: rotating cache with max size %d, keep %d", maxSize, keep)
	}
	return &TurboQuantRotatingKVCache{rotating: rotating{buffers: buffers{kind: spec.turboKind(true)}, maxSize: maxSize, keepN: keep}, spec: spec}, nil
}

// Spec is the cache's scheme.
func (c *TurboQuantKVCache) Spec() TurboSpec { return c.spec }

// Spec is the cache's scheme.
func (c *TurboQuantRotatingKVCache) Spec() TurboSpec { return c.spec }

// UpdateAndFetch codes the new keys and values and appends them.
func (c *TurboQuantKVCache) UpdateAndFetch(keys, values *tensor.Array) KV {
	var got KV
	scoped(func() {
		k, v := turboEncode("UpdateAndFetch", c.spec, keys, values)
		got = c.linear.UpdateAndFetch(k, v)
	})
	return c.spec.kv(got, keys.Dim(3), values.Dim(3))
}

// UpdateAndFetch codes the new keys and values and writes them as
// RotatingKVCache does.
func (c *TurboQuantRotatingKVCache) UpdateAndFetch(keys, values *tensor.Array) KV {
	var got KV
	scoped(func() {
		k, v := turboEncode("UpdateAndFetch", c.spec, keys, values)
		got = c.rotating.UpdateAndFetch(k, v)
	})
	return c.spec.kv(got, keys.Dim(3), values.Dim(3))
}

func (s TurboSpec) kv(got KV, dk, dv int) KV {
	return KV{Turbo: &TurboKV{Keys: got.Keys, Values: got.Values, Spec: s, KeyDim: dk, ValueDim: dv}, Start: got.Start}
}

// State is KVCache's, with the scheme (GroupSize TurboGroup, Bits the key
// bits, ValueBits the value bits).
func (c *TurboQuantKVCache) State() State { return c.spec.state(c.linear.State()) }

// State is RotatingKVCache's, with the scheme.
func (c *TurboQuantRotatingKVCache) State() State { return c.spec.state(c.rotating.State()) }

func (s TurboSpec) state(st State) State {
	st.GroupSize, st.Bits, st.ValueBits = TurboGroup, s.KeyBits, s.ValueBits
	return st
}

func (s TurboSpec) checkState(st State) error {
	if st.GroupSize != TurboGroup || st.Bits != s.KeyBits || st.ValueBits != s.ValueBits {
		return fmt.Errorf("kv: state of group %d, k%dv%d for a %s cache", st.GroupSize, st.Bits, st.ValueBits, s)
	}
	for _, a := range st.Arrays {
		if a.DType() != tensor.Uint8 {
			return fmt.Errorf("kv: %s state holds %s arrays (want uint8 codes)", st.Kind, a.DType())
		}
	}
	if len(st.Arrays) == 2 {
		kd, vd := s.keyDim(st.Arrays[0].Dim(3)), s.valueDim(st.Arrays[1].Dim(3))
		if s.KeyBytes(kd) != st.Arrays[0].Dim(3) || s.ValueBytes(vd) != st.Arrays[1].Dim(3) || s.Check(kd, vd) != nil {
			return fmt.Errorf("kv: %s state rows of %d and %d bytes fit no head dim", s, st.Arrays[0].Dim(3), st.Arrays[1].Dim(3))
		}
	}
	return nil
}

// SetState restores a state of the same kind and scheme.
func (c *TurboQuantKVCache) SetState(st State) error {
	if err := c.spec.checkState(st); err != nil {
		return err
	}
	return c.linear.SetState(st)
}

// SetState restores a state of the same kind and scheme.
func (c *TurboQuantRotatingKVCache) SetState(st State) error {
	if err := c.spec.checkState(st); err != nil {
		return err
	}
	return c.rotating.SetState(st)
}

// Clone returns an independent copy (copy-on-write).
func (c *TurboQuantKVCache) Clone() Cache {
	return &TurboQuantKVCache{linear: linear{c.cloneBuffers()}, spec: c.spec}
}

// Clone returns an independent copy (copy-on-write).
func (c *TurboQuantRotatingKVCache) Clone() Cache {
	return &TurboQuantRotatingKVCache{rotating: c.clone(), spec: c.spec}
}

// ToTurbo converts the cache to a TurboQuantKVCache holding its live
// tokens; c is left unchanged. Head dims the scheme cannot take are an
// error naming them.
func (c *KVCache) ToTurbo(spec TurboSpec) (*TurboQuantKVCache, error) {
	t, err := NewTurboQuantKVCache(spec)
	if err != nil {
		return nil, err
	}
	if err := c.turboInto(&t.buffers, spec, c.offset); err != nil {
		return nil, err
	}
	t.offset = c.offset
	return t, nil
}

// ToTurbo converts the cache to a TurboQuantRotatingKVCache with the same
// buffer layout (rotation included); c is left unchanged.
func (c *RotatingKVCache) ToTurbo(spec TurboSpec) (*TurboQuantRotatingKVCache, error) {
	t, err := NewTurboQuantRotatingKVCache(c.maxSize, c.keepN, spec)
	if err != nil {
		return nil, err
	}
	t.offset, t.idx = c.offset, c.idx
	if c.parts == nil {
		return t, nil
	}
	if err := c.turboInto(&t.buffers, spec, c.parts[0].Dim(2)); err != nil {
		return nil, err
	}
	return t, nil
}

// turboInto fills t's buffers with the codes of the first n slots of b's
// plain keys and values.
func (b *buffers) turboInto(t *buffers, spec TurboSpec, n int) error {
	if b.parts == nil {
		return nil
	}
	k, v := b.parts[0], b.parts[1]
	if err := spec.Check(k.Dim(3), v.Dim(3)); err != nil {
		return err
	}
	return tensor.Try(func() {
		scoped(func() {
			if n < k.Dim(2) {
				k, v = sliceT(k, 0, n), sliceT(v, 0, n)
			}
			ek, ev := turboEncode("ToTurbo", spec, k, v)
			keep(ek, ev)
			t.parts = []*tensor.Array{ek, ev}
		})
	})
}

// turboEncode codes keys [B, H, n, Dk] and values [B, H, n, Dv] into
// [B, H, n, KeyBytes] and [B, H, n, ValueBytes] uint8 arrays on their
// backend, spreading the rows over the CPUs.
func turboEncode(op string, spec TurboSpec, keys, values *tensor.Array) (*tensor.Array, *tensor.Array) {
	checkKV(op, keys, values)
	dk, dv := keys.Dim(3), values.Dim(3)
	if err := spec.Check(dk, dv); err != nil {
		throwf(op, tensor.ErrShape, "%v", err)
	}
	b, h, n := keys.Dim(0), keys.Dim(1), keys.Dim(2)
	rows := b * h * n
	kx := keys.Float32s()
	vx := values.Float32s()
	kb, vb := spec.KeyBytes(dk), spec.ValueBytes(dv)
	kout, vout := make([]byte, rows*kb), make([]byte, rows*vb)
	parallelRows(rows, func(lo, hi int) {
		var s turboScratch
		for r := lo; r < hi; r++ {
			if spec.QJL {
				encodeKeyQJL(kout[r*kb:(r+1)*kb], kx[r*dk:(r+1)*dk], spec.KeyBits, &s)
			} else {
				encodeKey(kout[r*kb:(r+1)*kb], kx[r*dk:(r+1)*dk], spec.KeyBits, &s)
			}
			encodeValue(vout[r*vb:(r+1)*vb], vx[r*dv:(r+1)*dv], spec.ValueBits, &s)
		}
	})
	be := keys.Backend()
	return tensor.FromBytesOn(be, kout, []int{b, h, n, kb}, tensor.Uint8, false),
		tensor.FromBytesOn(be, vout, []int{b, h, n, vb}, tensor.Uint8, false)
}

// parallelRows runs f over [0, n) in contiguous pieces on up to GOMAXPROCS
// goroutines (inline when small).
func parallelRows(n int, f func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), n/64)
	if w <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range w {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// Decode returns the keys [B, H, T, Dk] and the values [B, H, T, Dv]
// (back in the original domain) the codes stand for, as float32 arrays
// the caller owns.
func (t *TurboKV) Decode() (keys, values *tensor.Array) {
	return t.decode(false)
}

// decode decodes the rows; rotated leaves the values in the rotated domain.
func (t *TurboKV) decode(rotated bool) (keys, values *tensor.Array) {
	b, h, n := t.Keys.Dim(0), t.Keys.Dim(1), t.Keys.Dim(2)
	rows := b * h * n
	kraw, vraw := t.Keys.Bytes(), t.Values.Bytes()
	kb, vb := t.Keys.Dim(3), t.Values.Dim(3)
	dk, dv := t.KeyDim, t.ValueDim
	kout, vout := make([]float32, rows*dk), make([]float32, rows*dv)
	parallelRows(rows, func(lo, hi int) {
		var s turboScratch
		for r := lo; r < hi; r++ {
			if t.Spec.QJL {
				decodeKeyQJL(kout[r*dk:(r+1)*dk], kraw[r*kb:(r+1)*kb], t.Spec.KeyBits, &s)
			} else {
				decodeKey(kout[r*dk:(r+1)*dk], kraw[r*kb:(r+1)*kb], t.Spec.KeyBits)
			}
			if rotated {
				decodeValueRotated(nil, vout[r*dv:(r+1)*dv], vraw[r*vb:(r+1)*vb], dv, t.Spec.ValueBits)
			} else {
				decodeValue(vout[r*dv:(r+1)*dv], vraw[r*vb:(r+1)*vb], t.Spec.ValueBits, &s)
			}
		}
	})
	be := t.Keys.Backend()
	return tensor.FromFloat32On(be, kout, []int{b, h, n, dk}, tensor.Float32),
		tensor.FromFloat32On(be, vout, []int{b, h, n, dv}, tensor.Float32)
}

// turboAttention is attention over TurboQuant codes. Backends that
// implement tensor.TurboAttention read the codes in place (the CPU
// backend: scores from the integer keys, values summed in the rotated
// domain and transformed back once per query row); others decode the keys
// and the rotated values, run SDPA in q's dtype, and transform its output
// back (signs·H/√d as a matmul): the deferred inverse transform.
func turboAttention(q *tensor.Array, t *TurboKV, o tensor.SDPAOptions) *tensor.Array {
	if ta, ok := q.Backend().(tensor.TurboAttention); ok && o.Sinks == nil && !t.Spec.QJL {
		return ta.SDPATurbo(q, t.Keys, t.Values, t.Layout(), o)
	}
	return turboAttentionComposed(q, t, o)
}

// turboAttentionComposed is turboAttention from stock ops: decode, SDPA,
// inverse transform of the output.
func turboAttentionComposed(q *tensor.Array, t *TurboKV, o tensor.SDPAOptions) *tensor.Array {
	return tensor.WithScope(func() []*tensor.Array {
		k, v := t.decode(true)
		dt := q.DType()
		out := tensor.ScaledDotProductAttention(q, tensor.AsType(k, dt), tensor.AsType(v, dt), o)
		out = tensor.Matmul(tensor.AsType(out, tensor.Float32), turboInverse(q.Backend(), t.ValueDim))
		return []*tensor.Array{tensor.AsType(out, dt)}
	})[0]
}

// turboInverse is the [d, d] float32 matrix M with y·M = signs·H(y)/√d
// for a row y: M[i][j] = H[i][j]·sign[j]/√d.
func turboInverse(be tensor.Backend, d int) *tensor.Array {
	m := make([]float32, d*d)
	r := 1 / math.Sqrt(float64(d))
	for i := range d {
		for j := range d {
			h := r
			if bitsParity(i & j) {
				h = -r
			}
			m[i*d+j] = float32(h * turboSigns[j])
		}
	}
	return tensor.FromFloat32On(be, m, []int{d, d}, tensor.Float32)
}

func bitsParity(x int) bool {
	p := false
	for ; x != 0; x &= x - 1 {
		p = !p
	}
	return p
}
