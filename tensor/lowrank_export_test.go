package tensor

// LowRankComposed exposes the composition backends without LowRanker get.
var LowRankComposed = lowRankComposed
