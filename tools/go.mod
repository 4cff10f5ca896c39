module github.com/mlxgo/mlxgo/tools

go 1.26
