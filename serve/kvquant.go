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
