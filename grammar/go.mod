module github.com/mlxgo/mlxgo/grammar

go 1.26
