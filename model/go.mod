module github.com/mlxgo/mlxgo/model

go 1.26
