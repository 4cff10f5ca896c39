module github.com/mlxgo/mlxgo/tensor

go 1.26
