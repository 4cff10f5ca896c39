package serve

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// latencyBuckets are the request-latency histogram's upper bounds, in
// seconds.
var latencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// knownRoutes are the routes metrics are kept under; any other path
// counts as "other", so that clients cannot grow the label set.
var knownRoutes = []string{"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/messages",
	"/v1/messages/count_tokens", "/v1/responses", "/v1/embeddings", "/v1/models", "/health", "/stats", "/metrics"}

// metrics are the request counters and latency histograms GET /metrics
// exports, beside the engine's Stats.
type metrics struct {
	mu    sync.Mutex
	count map[routeCode]int64
	hist  map[string]*histogram
}

type routeCode struct {
	route string
	code  int
}

type histogram struct {
	counts []int64 // per bucket, not cumulative; one more for +Inf
	sum    float64
	n      int64
}

func routeLabel(path string) string {
	for _, r := range knownRoutes {
		if path == r {
			return r
		}
	}
	switch {
	case strings.HasPrefix(path, "/v1/models/"):
		return "/v1/models/{id}"
	case strings.HasPrefix(path, "/v1/responses/"):
		return "/v1/responses/{id}"
	}
	return "other"
}

// request records one answered request.
func (m *metrics) request(path string, code int, d time.Duration) {
	if code == 0 {
		code = http.StatusOK
	}
	route := routeLabel(path)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.count == nil {
		m.count, m.hist = map[routeCode]int64{}, map[string]*histogram{}
	}
	m.count[routeCode{route, code}]++
	h := m.hist[route]
	if h == nil {
		h = &histogram{counts: make([]int64, len(latencyBuckets)+1)}
		m.hist[route] = h
	}
	sec := d.Seconds()
	i := sort.SearchFloat64s(latencyBuckets, sec)
	h.counts[i]++
	h.sum += sec
	h.n++
}

// handleMetrics writes the Prometheus text exposition format.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	st := s.Stats()
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %g\n", name, help, name, name, v)
	}
	s.metrics.mu.Lock()
	b.WriteString("# HELP mlxgo_http_requests_total Requests answered, by route and status.\n# TYPE mlxgo_http_requests_total counter\n")
	keys := make([]routeCode, 0, len(s.metrics.count))
	for k := range s.metrics.count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].route != keys[j].route {
			return keys[i].route < keys[j].route
		}
		return keys[i].code < keys[j].code
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "mlxgo_http_requests_total{route=%q,code=\"%d\"} %d\n", k.route, k.code, s.metrics.count[k])
	}
	b.WriteString("# HELP mlxgo_http_request_duration_seconds Time from a request's arrival to its handler's return.\n# TYPE mlxgo_http_request_duration_seconds histogram\n")
	routes := make([]string, 0, len(s.metrics.hist))
	for r := range s.metrics.hist {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	for _, rt := range routes {
		h := s.metrics.hist[rt]
		var cum int64
		for i, ub := range latencyBuckets {
			cum += h.counts[i]
			fmt.Fprintf(&b, "mlxgo_http_request_duration_seconds_bucket{route=%q,le=\"%g\"} %d\n", rt, ub, cum)
		}
		fmt.Fprintf(&b, "mlxgo_http_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", rt, h.n)
		fmt.Fprintf(&b, "mlxgo_http_request_duration_seconds_sum{route=%q} %g\nmlxgo_http_request_duration_seconds_count{route=%q} %d\n", rt, h.sum, rt, h.n)
	}
	s.metrics.mu.Unlock()
	counter("mlxgo_generations_total", "Generations submitted to the engine.", float64(st.Requests))
	counter("mlxgo_generations_completed_total", "Generations that finished.", float64(st.Completed))
	counter("mlxgo_generations_cancelled_total", "Generations the client left.", float64(st.Cancelled))
	counter("mlxgo_generations_rejected_total", "Generations refused with 429 (queue full).", float64(st.Rejected))
	counter("mlxgo_generations_failed_total", "Generations that failed.", float64(st.Errors))
	counter("mlxgo_prompt_tokens_total", "Prompt tokens, cached ones included.", float64(st.PromptTokens))
	counter("mlxgo_prompt_cached_tokens_total", "Prompt tokens the prompt cache supplied.", float64(st.CachedTokens))
	counter("mlxgo_generated_tokens_total", "Tokens generated.", float64(st.Generated))
	counter("mlxgo_prompt_cache_hits_total", "Prompt cache hits.", float64(st.CacheHits))
	counter("mlxgo_prompt_cache_misses_total", "Prompt cache misses.", float64(st.CacheMisses))
	gauge("mlxgo_queue_depth", "Requests waiting for the engine.", float64(st.QueueDepth))
	gauge("mlxgo_queue_capacity", "The request queue's capacity.", float64(st.QueueCapacity))
	gauge("mlxgo_active_generations", "Generations running now.", float64(st.Active))
	gauge("mlxgo_kv_cache_bytes", "Bytes of KV held by the prompt cache.", float64(st.CacheBytes))
	gauge("mlxgo_prompt_cache_entries", "Entries in the prompt cache.", float64(st.CacheEntries))
	gauge("mlxgo_decode_tokens_per_second", "Decode speed of the last generation.", st.DecodeTPS)
	gauge("mlxgo_prefill_tokens_per_second", "Prefill speed of the last generation.", st.PrefillTPS)
	gauge("mlxgo_uptime_seconds", "Seconds since the server started.", st.UptimeSeconds)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
