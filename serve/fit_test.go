package serve

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/mlxgo/mlxgo/model"
)

// TestFitRoute: GET /fit returns the plan the server was given and
// /stats its admission numbers and the expert counters; without a plan
// /fit is a 404 and /stats has neither.
func TestFitRoute(t *testing.T) {
	d := loadDemo(t)
	plan, err := model.PlanMemory(d.dir, model.PlanOptions{Context: 1024, Memory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.config()
	cfg.Plan = plan
	cfg.ExpertStats = func() (model.ExpertStats, bool) { return model.ExpertStats{Hits: 3, Misses: 4}, true }
	_, hs := startServer(t, cfg)
	get := func(url string) (int, map[string]any) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, fit := get(hs.URL + "/fit")
	rep, _ := fit["report"].(map[string]any)
	if code != 200 || rep == nil || int64(rep["weights_bytes"].(float64)) != plan.WeightsBytes || int(fit["context_tokens"].(float64)) != 1024 {
		t.Errorf("/fit: %d %v", code, fit)
	}
	code, st := get(hs.URL + "/stats")
	adm, _ := st["admission"].(map[string]any)
	ex, _ := st["experts"].(map[string]any)
	if code != 200 || adm == nil || int(adm["max_safe_context"].(float64)) != plan.MaxContext || int64(adm["memory_budget_bytes"].(float64)) != 1<<30 ||
		int64(adm["usable_bytes"].(float64)) != (1<<30)-plan.FixedBytes() || ex == nil || ex["misses"].(float64) != 4 {
		t.Errorf("/stats: %d admission %v experts %v", code, adm, ex)
	}
	if _, ok := st["requests"]; !ok && len(st) < 3 {
		t.Errorf("/stats lost the engine's counters: %v", st)
	}

	_, bare := startServer(t, d.config())
	if code, _ := get(bare.URL + "/fit"); code != http.StatusNotFound {
		t.Errorf("/fit without a plan: %d", code)
	}
	if _, st := get(bare.URL + "/stats"); st["admission"] != nil || st["experts"] != nil {
		t.Errorf("/stats without a plan: %v", st)
	}
}
