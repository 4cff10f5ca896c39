module github.com/mlxgo/mlxgo/quant

go 1.26.0

require (
	github.com/mlxgo/mlxgo/kv v0.0.0
	github.com/mlxgo/mlxgo/mlxffi v0.0.0
	github.com/mlxgo/mlxgo/model v0.0.0
	github.com/mlxgo/mlxgo/tensor v0.0.0
)

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	golang.org/x/image v0.48.0 // indirect
)

replace github.com/mlxgo/mlxgo/kv => ../kv

replace github.com/mlxgo/mlxgo/mlxffi => ../mlxffi

replace github.com/mlxgo/mlxgo/model => ../model

replace github.com/mlxgo/mlxgo/tensor => ../tensor

replace github.com/mlxgo/mlxgo/tokenizer => ../tokenizer
