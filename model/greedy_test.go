package model

// Greedy is modeltest.Greedy, the reference greedy decoder, for this
// package's internal tests: they cannot import modeltest, which imports
// model. modeltest_test.go, in package model_test of the same test
// binary, sets it before any test runs.
var Greedy func(m Model, prompt []int32, maxTokens, chunk int, stop func(id int32) bool) ([]int32, error)
