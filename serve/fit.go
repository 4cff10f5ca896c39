package serve

import (
	"encoding/json"
	"net/http"

	"github.com/mlxgo/mlxgo/model"
)

// Admission is /stats' admission entry: the memory plan's limits the
// server runs under (Config.Plan).
type Admission struct {
	MaxSafeContext    int   `json:"max_safe_context"`
	MemoryBudgetBytes int64 `json:"memory_budget_bytes"`
	UsableBytes       int64 `json:"usable_bytes"` // the budget less weights, experts, transients and reserve: KV room
	WeightsBytes      int64 `json:"weights_bytes"`
	ResidentBytes     int64 `json:"resident_weights_bytes"`
	ExpertCacheBytes  int64 `json:"expert_cache_bytes,omitempty"`
	KVBytesPerToken   int64 `json:"kv_bytes_per_token"`
}

// admission summarises the plan (nil without one).
func (s *Server) admission() *Admission {
	p := s.cfg.Plan
	if p == nil {
		return nil
	}
	return &Admission{MaxSafeContext: p.MaxContext, MemoryBudgetBytes: p.MemoryBytes, UsableBytes: max(p.MemoryBytes-p.FixedBytes(), 0),
		WeightsBytes: p.WeightsBytes, ResidentBytes: p.ResidentWeightsBytes, ExpertCacheBytes: p.ExpertCacheBytes, KVBytesPerToken: p.KVBytesPerToken}
}

// statsWithPlan is GET /stats: the engine's counters, with the plan's
// admission numbers and the expert streaming counters when there are.
func (s *Server) statsWithPlan() any {
	st := s.Stats()
	adm := s.admission()
	var ex *model.ExpertStats
	if f := s.cfg.ExpertStats; f != nil {
		if e, ok := f(); ok {
			ex = &e
		}
	}
	if adm == nil && ex == nil {
		return st
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return st
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return st
	}
	if adm != nil {
		m["admission"] = adm
	}
	if ex != nil {
		m["experts"] = ex
	}
	return m
}

// handleFit is GET /fit: the memory plan (404 when the server has none).
func (s *Server) handleFit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Plan == nil {
		writeError(w, http.StatusNotFound, "the server was started without a memory plan", "not_found_error", "", "")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ContextTokens int         `json:"context_tokens"`
		Report        *model.Plan `json:"report"`
	}{s.cfg.Plan.Context, s.cfg.Plan})
}
