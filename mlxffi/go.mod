module github.com/mlxgo/mlxgo/mlxffi

go 1.26
