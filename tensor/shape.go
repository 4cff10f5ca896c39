package tensor

import "slices"

// Reshape gives a a new shape of the same size; one dim may be -1 (inferred).
// It is a view when a is contiguous.
func Reshape(a *Array, shape ...int) *Array {
	a.check()
	s := slices.Clone(shape)
	infer := -1
	known := 1
	for i, d := range s {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			throw("Reshape", ErrShape, "bad shape %v", shape)
		default:
			known *= d
		}
	}
	if infer >= 0 {
		if known == 0 || a.Size()%known != 0 {
			throw("Reshape", ErrShape, "cannot reshape %v to %v", a.shape, shape)
		}
		s[infer] = a.Size() / known
	}
	if prod(s) != a.Size() {
		throw("Reshape", ErrShape, "cannot reshape %v (%d elements) to %v", a.shape, a.Size(), shape)
	}
	return a.be.Reshape(a, s)
}

// Flatten reshapes to 1-D.
func Flatten(a *Array) *Array { return Reshape(a, -1) }

// Transpose permutes axes; with no axes it reverses them. A view where the backend has strides.
func Transpose(a *Array, axes ...int) *Array {
	a.check()
	n := a.NDim()
	perm := make([]int, n)
	if len(axes) == 0 {
		for i := range perm {
			perm[i] = n - 1 - i
		}
	} else {
		if len(axes) != n {
			throw("Transpose", ErrArgument, "%d axes for %d dims", len(axes), n)
		}
		seen := make([]bool, n)
		for i, ax := range axes {
			p := normAxis(ax, n, "Transpose")
			if seen[p] {
				throw("Transpose", ErrArgument, "repeated axis in %v", axes)
			}
			seen[p] = true
			perm[i] = p
		}
	}
	return a.be.Transpose(a, perm)
}

// SwapAxes exchanges two axes.
func SwapAxes(a *Array, i, j int) *Array {
	n := a.NDim()
	i, j = normAxis(i, n, "SwapAxes"), normAxis(j, n, "SwapAxes")
	perm := make([]int, n)
	for k := range perm {
		perm[k] = k
	}
	perm[i], perm[j] = perm[j], perm[i]
	return a.be.Transpose(a, perm)
}

// ExpandDims inserts a size-1 axis at axis (negative counts in the result).
func ExpandDims(a *Array, axis int) *Array {
	a.check()
	n := a.NDim() + 1
	ax := normAxis(axis, n, "ExpandDims")
	s := slices.Insert(slices.Clone(a.shape), ax, 1)
	return a.be.Reshape(a, s)
}

// Squeeze removes the given size-1 axes, or all of them when none are given.
func Squeeze(a *Array, axes ...int) *Array {
	a.check()
	var s []int
	if len(axes) == 0 {
		for _, d := range a.shape {
			if d != 1 {
				s = append(s, d)
			}
		}
	} else {
		drop := make([]bool, a.NDim())
		for _, ax := range axes {
			p := normAxis(ax, a.NDim(), "Squeeze")
			if a.shape[p] != 1 {
				throw("Squeeze", ErrShape, "axis %d of %v is not 1", ax, a.shape)
			}
			drop[p] = true
		}
		for i, d := range a.shape {
			if !drop[i] {
				s = append(s, d)
			}
		}
	}
	return a.be.Reshape(a, s)
}

// BroadcastTo expands a to shape by NumPy rules (a view where possible).
func BroadcastTo(a *Array, shape ...int) *Array {
	a.check()
	out, ok := BroadcastShapes(a.shape, shape)
	if !ok || !slices.Equal(out, shape) {
		throw("BroadcastTo", ErrShape, "cannot broadcast %v to %v", a.shape, shape)
	}
	return a.be.BroadcastTo(a, slices.Clone(shape))
}

// Contiguous returns a row-major copy of a (a new handle to the same storage
// when a already is).
func Contiguous(a *Array) *Array { a.check(); return a.be.Contiguous(a) }

// normSlice clamps start/stop/step like Python slicing with positive steps;
// nil stop means to the end, nil step means 1; missing trailing axes are whole.
func normSlice(op string, shape, start, stop, step []int) (s0, s1, st, out []int) {
	n := len(shape)
	if len(start) > n || len(stop) > n || len(step) > n {
		throw(op, ErrArgument, "slice of rank %d/%d/%d for %d dims", len(start), len(stop), len(step), n)
	}
	s0, s1, st, out = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for i, d := range shape {
		b, e, k := 0, d, 1
		if i < len(start) {
			b = start[i]
		}
		if stop != nil && i < len(stop) {
			e = stop[i]
		}
		if step != nil && i < len(step) {
			k = step[i]
		}
		if k <= 0 {
			throw(op, ErrArgument, "step %d on axis %d (steps must be positive)", k, i)
		}
		if b < 0 {
			b += d
		}
		if e < 0 {
			e += d
		}
		b = min(max(b, 0), d)
		e = min(max(e, b), d)
		s0[i], s1[i], st[i] = b, e, k
		out[i] = (e - b + k - 1) / k
	}
	return
}

// Slice takes a[start:stop:step] per axis (Python rules for negative and
// out-of-range bounds; steps positive). A nil stop or step means "to the
// end" and 1; axes beyond the given ones are taken whole. A view where cheap.
func Slice(a *Array, start, stop, step []int) *Array {
	a.check()
	s0, s1, st, _ := normSlice("Slice", a.shape, start, stop, step)
	return a.be.Slice(a, s0, s1, st)
}

// SliceAxis takes a[..., start:stop, ...] on one axis.
func SliceAxis(a *Array, axis, start, stop int) *Array {
	a.check()
	ax := normAxis(axis, a.NDim(), "SliceAxis")
	s0 := make([]int, a.NDim())
	s1 := slices.Clone(a.shape)
	s0[ax], s1[ax] = start, stop
	return Slice(a, s0, s1, nil)
}

func prepareUpdate(op string, a, update *Array, start, stop, step []int) (s0, s1, st []int, u *Array, owned bool) {
	sameBackend(op, a, update)
	s0, s1, st, region := normSlice(op, a.shape, start, stop, step)
	b, ok := BroadcastShapes(update.shape, region)
	if !ok || !slices.Equal(b, region) {
		throw(op, ErrShape, "update %v does not fit region %v", update.shape, region)
	}
	u = update
	if u.dtype != a.dtype {
		u = AsType(u, a.dtype)
		owned = true
	}
	if !slices.Equal(u.shape, region) {
		v := u.be.BroadcastTo(u, region)
		if owned {
			u.Free()
		}
		u, owned = v, true
	}
	return
}

// SliceUpdate returns a copy of a whose region start:stop:step holds update
// (broadcast and cast as needed). a is unchanged.
func SliceUpdate(a, update *Array, start, stop, step []int) *Array {
	s0, s1, st, u, owned := prepareUpdate("SliceUpdate", a, update, start, stop, step)
	if owned {
		defer u.Free()
	}
	return a.be.SliceUpdate(a, u, s0, s1, st)
}

// SetSlice writes update into a's region start:stop:step in place. Views
// and copies taken from a before keep their old values (copy-on-write), so
// the semantics match on lazy and eager backends. This is the KV-cache write.
func (a *Array) SetSlice(update *Array, start, stop, step []int) {
	s0, s1, st, u, owned := prepareUpdate("SetSlice", a, update, start, stop, step)
	if owned {
		defer u.Free()
	}
	a.be.SliceAssign(a, u, s0, s1, st)
}

// Concatenate joins arrays along axis; all other dims must match.
func Concatenate(arrs []*Array, axis int) *Array {
	if len(arrs) == 0 {
		throw("Concatenate", ErrArgument, "no arrays")
	}
	be := sameBackend("Concatenate", arrs...)
	first := arrs[0]
	ax := normAxis(axis, first.NDim(), "Concatenate")
	shape := slices.Clone(first.shape)
	dt := first.dtype
	for _, a := range arrs[1:] {
		dt = PromoteTypes(dt, a.dtype)
		if a.NDim() != first.NDim() {
			throw("Concatenate", ErrShape, "%v and %v differ in rank", first.shape, a.shape)
		}
		for i := range shape {
			if i != ax && a.shape[i] != first.shape[i] {
				throw("Concatenate", ErrShape, "%v and %v differ off axis %d", first.shape, a.shape, ax)
			}
		}
		shape[ax] += a.shape[ax]
	}
	in := make([]*Array, len(arrs))
	for i, a := range arrs {
		in[i] = a
		if a.dtype != dt {
			in[i] = AsType(a, dt)
			defer in[i].Free()
		}
	}
	return be.Concatenate(in, ax, shape)
}

// Stack joins same-shaped arrays along a new axis.
func Stack(arrs []*Array, axis int) *Array {
	if len(arrs) == 0 {
		throw("Stack", ErrArgument, "no arrays")
	}
	ax := normAxis(axis, arrs[0].NDim()+1, "Stack")
	ex := make([]*Array, len(arrs))
	for i, a := range arrs {
		if !slices.Equal(a.Shape(), arrs[0].Shape()) {
			throw("Stack", ErrShape, "%v and %v differ", arrs[0].shape, a.shape)
		}
		ex[i] = ExpandDims(a, ax)
	}
	defer Free(ex...)
	return Concatenate(ex, ax)
}

// Split cuts a along axis into parts of the given sizes (views where cheap).
func Split(a *Array, sizes []int, axis int) []*Array {
	a.check()
	ax := normAxis(axis, a.NDim(), "Split")
	total := 0
	for _, s := range sizes {
		total += s
	}
	if total != a.shape[ax] {
		throw("Split", ErrShape, "sizes %v do not sum to %d", sizes, a.shape[ax])
	}
	out := make([]*Array, len(sizes))
	off := 0
	for i, s := range sizes {
		out[i] = SliceAxis(a, ax, off, off+s)
		off += s
	}
	return out
}

// ---- indexing ----

func checkIndices(op string, idx *Array) {
	if !idx.DType().IsInteger() {
		throw(op, ErrDType, "indices must be integers, got %s", idx.dtype)
	}
}

// Take gathers along axis: the result has a's shape with axis replaced by
// indices' shape. Negative indices count from the end; indices out of range panic.
// Row gather (an embedding lookup) is Take(table, ids, 0).
func Take(a, indices *Array, axis int) *Array {
	sameBackend("Take", a, indices)
	checkIndices("Take", indices)
	return a.be.Take(a, indices, normAxis(axis, a.NDim(), "Take"))
}

// TakeAlongAxis gathers a[..., indices[...], ...] along axis; indices has
// a's rank and broadcasts against it off the axis.
func TakeAlongAxis(a, indices *Array, axis int) *Array {
	sameBackend("TakeAlongAxis", a, indices)
	checkIndices("TakeAlongAxis", indices)
	if indices.NDim() != a.NDim() {
		throw("TakeAlongAxis", ErrShape, "indices rank %d, array rank %d", indices.NDim(), a.NDim())
	}
	ax := normAxis(axis, a.NDim(), "TakeAlongAxis")
	for i := range a.shape {
		if i != ax && indices.shape[i] != a.shape[i] && indices.shape[i] != 1 && a.shape[i] != 1 {
			throw("TakeAlongAxis", ErrShape, "indices %v do not broadcast with %v", indices.shape, a.shape)
		}
	}
	return a.be.TakeAlongAxis(a, indices, ax)
}

// PutAlongAxis returns a copy of a with values written at indices along
// axis (values broadcast to indices' shape; later duplicates win).
func PutAlongAxis(a, indices, values *Array, axis int) *Array {
	sameBackend("PutAlongAxis", a, indices, values)
	checkIndices("PutAlongAxis", indices)
	if indices.NDim() != a.NDim() {
		throw("PutAlongAxis", ErrShape, "indices rank %d, array rank %d", indices.NDim(), a.NDim())
	}
	ax := normAxis(axis, a.NDim(), "PutAlongAxis")
	for i := range a.shape {
		if i != ax && indices.shape[i] != a.shape[i] {
			throw("PutAlongAxis", ErrShape, "indices %v do not match %v off axis %d", indices.shape, a.shape, ax)
		}
	}
	v := values
	if !slices.Equal(v.shape, indices.shape) || v.dtype != a.dtype {
		c := AsType(values, a.dtype)
		defer c.Free()
		b, ok := BroadcastShapes(c.shape, indices.shape)
		if !ok || !slices.Equal(b, indices.shape) {
			throw("PutAlongAxis", ErrShape, "values %v do not broadcast to indices %v", values.shape, indices.shape)
		}
		v = c.be.BroadcastTo(c, slices.Clone(indices.shape))
		defer v.Free()
	}
	return a.be.PutAlongAxis(a, indices, v, ax)
}
