module github.com/mlxgo/mlxgo/cli

go 1.26

require github.com/spf13/pflag v1.1.0 // indirect
