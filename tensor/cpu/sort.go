package cpu

import (
	"cmp"
	"math"
	"math/bits"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// Sorting works on order-preserving unsigned keys: every dtype but int64
// maps to a uint32 whose unsigned order is the value order with NaN last.
// Argsort and Argpartition pack key<<32|index into a uint64, which makes
// every key unique, so a plain (fast, unstable) sort of the packed words
// is a stable argsort, and selection never meets duplicates.

// ewKeyF32 maps a float to its order-preserving key. For floats NaN maps
// above +Inf; with zeroSign, -0 and +0 share a key (they compare equal).
func ewKeyF32(v float32, zeroSign bool) uint32 {
	b := math.Float32bits(v)
	if v != v {
		b = 0x7fc00000
	} else if zeroSign && v == 0 {
		b = 0
	}
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

func ewUnkeyF32(k uint32) float32 {
	if k&(1<<31) != 0 {
		return math.Float32frombits(k &^ (1 << 31))
	}
	return math.Float32frombits(^k)
}

// ewKeys fills keys with the order keys of n elements at off, stride st.
func ewKeys(dt tensor.DType, data []byte, off, st int, keys []uint32, fb []float32, zeroSign bool) {
	switch dt {
	case tensor.Float32, tensor.BFloat16, tensor.Float16:
		x := ewLoadF32(dt, data, off, st, len(keys), fb)
		for i, v := range x {
			keys[i] = ewKeyF32(v, zeroSign)
		}
	case tensor.Int32:
		s := ewView[int32](data)
		for i := range keys {
			keys[i] = uint32(s[off+i*st]) ^ 1<<31
		}
	case tensor.Uint32:
		s := ewView[uint32](data)
		for i := range keys {
			keys[i] = s[off+i*st]
		}
	default: // bool, uint8
		s := ewView[uint8](data)
		for i := range keys {
			keys[i] = uint32(s[off+i*st])
		}
	}
}

// ewStoreKeys writes decoded keys to the output row.
func ewStoreKeys(dt tensor.DType, data []byte, off, st int, keys []uint32, fb []float32) {
	switch dt {
	case tensor.Float32, tensor.BFloat16, tensor.Float16:
		f := fb[:len(keys)]
		for i, k := range keys {
			f[i] = ewUnkeyF32(k) // exact: the values came from dt
		}
		ewStoreF32(dt, data, off, st, f)
	case tensor.Int32:
		d := ewView[int32](data)
		for i, k := range keys {
			d[off+i*st] = int32(k ^ 1<<31)
		}
	case tensor.Uint32:
		d := ewView[uint32](data)
		for i, k := range keys {
			d[off+i*st] = k
		}
	default:
		d := ewView[uint8](data)
		for i, k := range keys {
			d[off+i*st] = uint8(k)
		}
	}
}

// Sort sorts ascending along axis with NaN last.
func (be *Backend) Sort(a *tensor.Array, axis int) *tensor.Array {
	dt := a.DType()
	out, om := be.newArray(a.Shape(), dt)
	if a.Size() == 0 {
		return out
	}
	rows := ewRowsOf(a, axis)
	n, ist, ost := rows.n, rows.inStride, rows.outStride
	data, od := get(a).buf.data, om.buf.data
	rows.each(func() func(int, int) {
		keys := make([]uint32, n)
		fb := make([]float32, n)
		ib := make([]int64, n)
		return func(oo, ii int) {
			if dt == tensor.Int64 {
				// sort a copy: dense int64 rows load as the storage itself
				x := ib[:copy(ib, ewLoadI64(dt, data, ii, ist, n, ib))]
				slices.Sort(x)
				ewStoreI64(dt, od, oo, ost, x)
				return
			}
			ewKeys(dt, data, ii, ist, keys, fb, false)
			slices.Sort(keys)
			ewStoreKeys(dt, od, oo, ost, keys, fb)
		}
	})
	return out
}

// ewArgRows runs f on every row of a along axis with the row's packed
// key<<32|index words (for int64, with a stable index sort instead) and
// writes the indices f leaves in order to an int32 output.
func (be *Backend) ewArgRows(a *tensor.Array, axis int, f func(p []uint64)) *tensor.Array {
	dt := a.DType()
	out, om := be.newArray(a.Shape(), tensor.Int32)
	if a.Size() == 0 {
		return out
	}
	rows := ewRowsOf(a, axis)
	n, ist, ost := rows.n, rows.inStride, rows.outStride
	data, od := get(a).buf.data, om.buf.data
	rows.each(func() func(int, int) {
		keys := make([]uint32, n)
		fb := make([]float32, n)
		ib := make([]int64, n)
		p := make([]uint64, n)
		idx := make([]int32, n)
		return func(oo, ii int) {
			o := ewView[int32](od)
			if dt == tensor.Int64 {
				// 64-bit keys do not pack with an index: sort indices by (value, index)
				x := ewLoadI64(dt, data, ii, ist, n, ib)
				for i := range idx {
					idx[i] = int32(i)
				}
				slices.SortFunc(idx, func(u, v int32) int {
					if c := cmp.Compare(x[u], x[v]); c != 0 {
						return c
					}
					return cmp.Compare(u, v)
				})
				for i, v := range idx {
					o[oo+i*ost] = v
				}
				return
			}
			ewKeys(dt, data, ii, ist, keys, fb, true)
			for i, k := range keys {
				p[i] = uint64(k)<<32 | uint64(i)
			}
			f(p)
			for i, v := range p {
				o[oo+i*ost] = int32(uint32(v))
			}
		}
	})
	return out
}

// Argsort returns the int32 indices that sort a ascending along axis;
// equal values keep their order (stable), NaN goes last.
func (be *Backend) Argsort(a *tensor.Array, axis int) *tensor.Array {
	return be.ewArgRows(a, axis, func(p []uint64) {
		if len(p) < radixMin {
			slices.Sort(p)
			return
		}
		// rows may run on several goroutines: scratch is per call
		radixSortHigh32(p, make([]uint64, len(p)))
	})
}

// radixMin is the row length from which argsort uses a radix sort: a
// vocabulary-sized row (the sampler's top-p) sorts several times faster
// than with a comparison sort.
const radixMin = 2048

// radixSortHigh32 sorts words by their upper 32 bits (the order key) with
// a stable least-significant-digit radix sort in three 11-bit passes. The
// words enter in index order, so equal keys keep index order (stability).
func radixSortHigh32(p, tmp []uint64) {
	const bits = 11
	const buckets = 1 << bits
	var count [buckets]int
	src, dst := p, tmp
	for shift := 32; shift < 64; shift += bits {
		clear(count[:])
		for _, v := range src {
			count[(v>>shift)&(buckets-1)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, v := range src {
			d := (v >> shift) & (buckets - 1)
			dst[count[d]] = v
			count[d]++
		}
		src, dst = dst, src
	}
	// three passes leave the result in tmp
	copy(p, src)
}

// Argpartition returns int32 indices along axis such that position kth
// holds the index of the kth smallest element (ties broken by index, NaN
// largest), with the indices of elements ≤ it before and ≥ it after. It
// selects in O(n) average time, so top-k over a large vocabulary does not
// pay for a full sort.
func (be *Backend) Argpartition(a *tensor.Array, kth, axis int) *tensor.Array {
	return be.ewArgRows(a, axis, func(p []uint64) { ewSelect(p, kth) })
}

// ewSelect reorders s (distinct values) so that s[k] is the value a sort
// would put there, smaller values before it and larger after:
// quickselect with a median-of-three pivot, falling back to sorting the
// remaining range if partitions keep coming out lopsided.
func ewSelect(s []uint64, k int) {
	lo, hi := 0, len(s)
	budget := 2*bits.Len(uint(len(s))) + 4
	for hi-lo > 24 {
		if budget == 0 {
			slices.Sort(s[lo:hi])
			return
		}
		budget--
		mid := lo + (hi-lo)/2
		a, b, c := s[lo], s[mid], s[hi-1]
		if a > b {
			a, b = b, a
		}
		if b > c {
			b = c
			if a > b {
				b = a
			}
		}
		pivot := b
		i, j := lo, hi-1
		for i <= j {
			for s[i] < pivot {
				i++
			}
			for s[j] > pivot {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		// s[lo:j+1] ≤ pivot, s[i:hi] ≥ pivot, and anything between equals it
		switch {
		case k <= j:
			hi = j + 1
		case k >= i:
			lo = i
		default:
			return
		}
	}
	slices.Sort(s[lo:hi])
}
