package model

// Module names a layer as the loader hands it to an architecture: what a
// Wrapper is told about each layer it may stand in for.
type Module struct {
	// Path is the layer's full module path as checkpoints name it
	// ("model.layers.0.self_attn.q_proj"). An expert bank's is where MLX
	// checkpoints stack it (BankPath: "model.layers.0.mlp.switch_mlp.up_proj"),
	// whatever layout it was read from; a tied head's is its table's.
	Path string
	// Source is the stored tensor the layer's weight was read from: the
	// path's ".weight", or the per-expert or fused tensor a bank was
	// stacked or split from.
	Source string
}

// A Wrapper stands in for layers while a checkpoint is loaded
// (LoadOptions.Wrap): each layer an architecture asks Weights for is
// handed to it, and what it returns takes the layer's place. This is how
// code outside the package changes what a layer computes or observes its
// inputs — calibration for quantization, adapters that add a low-rank
// residual to the base layer — while the layer types carry nothing for
// it. A method that has nothing to do returns the layer it was given.
type Wrapper interface {
	// Projection is given each dense layer: a *Linear, or a *TiedHead for
	// an output head tied to its embedding table.
	Projection(m Module, p Projection) Projection
	// Experts is given each expert bank (a *SwitchLinear).
	Experts(m Module, b ExpertBank) ExpertBank
	// Embedding is given each embedding table. The architecture looks
	// rows up in the table it returns and reads its DType.
	Embedding(m Module, e *Embedding) *Embedding
}
