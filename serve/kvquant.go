package serve

import (
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
)

// poolLayout is the batched lane's pool layout: the model's own
// (generate.PoolLayout), with every layer that has a cache of its own
// stored as TurboQuant codes when Config.KVQuant is set. The block probe,
// the pool and the SSD tier's key all take it, so the budget counts
// TurboQuant blocks and the tier never mixes files of two schemes.
func poolLayout(cfg *Config) ([]kv.LayerSpec, error) {
	specs, err := generate.PoolLayout(cfg.Model)
	if err != nil || cfg.KVQuant == nil {
		return specs, err
	}
	return kv.TurboLayerSpecs(specs, *cfg.KVQuant)
}

// ssdModel is the model whose MakeCaches the SSD tier fills with a
// pool's states before writing them: with Config.KVQuant, its caches are
// the contiguous TurboQuant ones the pool's TurboQuant blocks are states
// of.
func ssdModel(cfg *Config) generate.Model {
	if cfg.KVQuant == nil {
		return cfg.Model
	}
	return turboCachesModel{cfg.Model, *cfg.KVQuant}
}

// turboCachesModel is a model whose MakeCaches converts the model's plain
// caches (full and sliding-window) to empty TurboQuant ones.
type turboCachesModel struct {
	generate.Model
	spec kv.TurboSpec
}

// MakeCaches returns the model's caches as empty TurboQuant caches.
func (m turboCachesModel) MakeCaches() []kv.Cache {
	cs := m.Model.MakeCaches()
	for i, c := range cs {
		var t kv.Cache
		var err error
		switch c := c.(type) {
		case *kv.KVCache:
			t, err = c.ToTurbo(m.spec)
		case *kv.RotatingKVCache:
			t, err = c.ToTurbo(m.spec)
		default:
			continue
		}
		if err != nil {
			panic(err) // empty caches: only a bad scheme fails, and New refused it
		}
		c.Free()
		cs[i] = t
	}
	return cs
}
