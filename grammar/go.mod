module github.com/mlxgo/mlxgo/grammar

go 1.26.0

require github.com/santhosh-tekuri/jsonschema/v6 v6.0.2

require golang.org/x/text v0.44.0 // indirect
