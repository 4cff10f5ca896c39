module github.com/mlxgo/mlxgo/tokenizer

go 1.26
