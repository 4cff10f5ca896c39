module github.com/mlxgo/mlxgo/sampler

go 1.26

require github.com/mlxgo/mlxgo/tensor v0.0.0

replace github.com/mlxgo/mlxgo/tensor => ../tensor
