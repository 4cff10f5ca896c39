module github.com/mlxgo/mlxgo/mlxffi

go 1.26

require (
	github.com/ebitengine/purego v0.11.3
	github.com/mlxgo/mlxgo/tensor v0.0.0
)

replace github.com/mlxgo/mlxgo/tensor => ../tensor
