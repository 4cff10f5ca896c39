package lora

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// Model is a model loaded with a Host standing in for its layers: a
// model.Model whose passes apply a Selection of the mounted adapters.
// With returns views of one loaded model with other selections; passes
// through the views of one model are serialised.
type Model struct {
	base model.Model
	host *Host
	sel  Selection
	// own is what Close frees: the base model and the adapters Open read
	// (nil for views).
	own *owned
}

type owned struct {
	adapters []*Adapter
	closed   bool
}

// New returns the Model of base, which was loaded with host as its
// LoadOptions.Wrap, applying sel. Close closes base; the host's mounted
// adapters stay the caller's.
func New(base model.Model, host *Host, sel Selection) *Model {
	if host.dtype == tensor.Invalid {
		host.SetDType(base.Info().DType)
	}
	return &Model{base: base, host: host, sel: sel, own: &owned{}}
}

// Open loads the model in dir (opts as for model.Load; its Wrap must be
// nil: the Host takes that place) and mounts the adapters in the folders
// given, in order, each as its folder's name (a repeated name gets "-2",
// "-3", …), all selected: the Model's passes add their residuals in that
// order. Any adapter that does not load or fit fails the whole call.
func Open(dir string, opts *model.LoadOptions, adapters ...string) (*Model, error) {
	var o model.LoadOptions
	if opts != nil {
		o = *opts
	}
	if o.Wrap != nil {
		return nil, errors.New("lora: Open: LoadOptions.Wrap is already set")
	}
	host := NewHost()
	o.Wrap = host
	base, err := model.Load(dir, &o)
	if err != nil {
		return nil, err
	}
	m := New(base, host, Selection{})
	if o.DType.Valid() {
		host.SetDType(o.DType)
	}
	be := o.Backend
	if l, ok := base.(interface{ Backend() tensor.Backend }); ok {
		be = l.Backend()
	}
	var ids []string
	for _, p := range adapters {
		a, err := Load(p, be)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.own.adapters = append(m.own.adapters, a)
		id := filepath.Base(filepath.Clean(p))
		for n := 2; ; n++ {
			if _, dup := host.Mounted(id); !dup {
				break
			}
			id = filepath.Base(filepath.Clean(p)) + "-" + strconv.Itoa(n)
		}
		if _, err := host.Mount(id, a); err != nil {
			m.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	m.sel = Selection{Set: ids}
	return m, nil
}

// Host is the Host of the model: mount and unmount adapters through it.
func (m *Model) Host() *Host { return m.host }

// Base is the model underneath. Its own passes apply no adapter (the
// Host's stand-ins add residuals only during a pass of a Model).
func (m *Model) Base() model.Model { return m.base }

// Selection is what the Model's passes apply.
func (m *Model) Selection() Selection { return m.sel }

// With returns a view of the same loaded model whose passes apply sel.
// Closing a view does nothing; close the Model it came from.
func (m *Model) With(sel Selection) *Model {
	return &Model{base: m.base, host: m.host, sel: sel}
}

// Forward implements model.Model with the Model's selection.
func (m *Model) Forward(ids *tensor.Array, caches []kv.Cache, opts *model.ForwardOptions) (out *tensor.Array, err error) {
	return m.ForwardWith(m.sel, ids, caches, opts)
}

// ForwardWith runs a forward pass applying sel (with Spans, over the
// B·T token positions of ids in row-major order).
func (m *Model) ForwardWith(sel Selection, ids *tensor.Array, caches []kv.Cache, opts *model.ForwardOptions) (out *tensor.Array, err error) {
	err = m.host.run(sel, func() error {
		var e error
		out, e = m.base.Forward(ids, caches, opts)
		return e
	})
	return out, err
}

// Logits implements model.Model with the Model's selection (which
// matters only when an adapter adapts the output head).
func (m *Model) Logits(hidden *tensor.Array) (*tensor.Array, error) {
	return m.LogitsWith(m.sel, hidden)
}

// LogitsWith projects hidden states applying sel (with Spans, over the
// rows of hidden's leading dimensions).
func (m *Model) LogitsWith(sel Selection, hidden *tensor.Array) (out *tensor.Array, err error) {
	err = m.host.run(sel, func() error {
		var e error
		out, e = m.base.Logits(hidden)
		return e
	})
	return out, err
}

// MakeCaches implements model.Model.
func (m *Model) MakeCaches() []kv.Cache { return m.base.MakeCaches() }

// Info implements model.Model.
func (m *Model) Info() model.Info { return m.base.Info() }

// Backend is the backend the weights live on (as model.Loaded's), or nil
// when the base model does not say.
func (m *Model) Backend() tensor.Backend {
	if l, ok := m.base.(interface{ Backend() tensor.Backend }); ok {
		return l.Backend()
	}
	return nil
}

// Close implements model.Model: it closes the base model and frees the
// adapters Open read (and what mounting them made). A view's Close does
// nothing.
func (m *Model) Close() error {
	if m.own == nil || m.own.closed {
		return nil
	}
	m.own.closed = true
	for _, id := range m.host.IDs() {
		m.host.Unmount(id)
	}
	for _, a := range m.own.adapters {
		a.Free()
	}
	return m.base.Close()
}

// Describe is one line about a mounted adapter, for logs.
func Describe(mt *Mounted) string {
	a := mt.Adapter
	return fmt.Sprintf("%s (%s format, rank %d, scale %g, %d layers, %d bytes)", mt.ID, a.Format, a.Rank, a.Scale, mt.Layers(), a.SizeBytes)
}
