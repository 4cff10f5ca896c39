module github.com/mlxgo/mlxgo/cli

go 1.26
