module github.com/mlxgo/mlxgo/kv

go 1.26
