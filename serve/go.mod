module github.com/mlxgo/mlxgo/serve

go 1.26
