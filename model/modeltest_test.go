package model_test

import (
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
)

func init() { model.Greedy = modeltest.Greedy }
