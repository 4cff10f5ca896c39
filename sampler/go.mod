module github.com/mlxgo/mlxgo/sampler

go 1.26
