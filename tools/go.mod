module github.com/mlxgo/mlxgo/tools

go 1.26

require (
	github.com/mlxgo/mlxgo/mlxffi v0.0.0
	github.com/mlxgo/mlxgo/tensor v0.0.0
)

require github.com/ebitengine/purego v0.11.3 // indirect

replace github.com/mlxgo/mlxgo/mlxffi => ../mlxffi

replace github.com/mlxgo/mlxgo/tensor => ../tensor
