module github.com/mlxgo/mlxgo/generate

go 1.26
