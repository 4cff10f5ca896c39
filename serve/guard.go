package serve

import (
	"crypto/subtle"
	"fmt"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// anthropicRoute reports whether path is one of the Anthropic endpoints,
// whose errors take Anthropic's shape.
func anthropicRoute(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

// fail writes err in the shape of the API the route belongs to.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if anthropicRoute(r.URL.Path) || (r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/")) && anthropicClient(r) {
		writeAnthropicError(w, err)
		return
	}
	s.writeAPIError(w, err)
}

// anthropicClient reports whether a request comes from an Anthropic
// client: its SDKs always send anthropic-version.
func anthropicClient(r *http.Request) bool { return r.Header.Get("anthropic-version") != "" }

// guard applies the checks every request passes before its route: the
// Host allow-list, CORS (answering preflights), the API key and the JSON
// content type of POST bodies. It reports whether the request may go on.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if len(s.cfg.AllowedHosts) > 0 && !hostAllowed(r.Host, s.cfg.AllowedHosts) {
		s.fail(w, r, &apiError{status: http.StatusForbidden, message: "the Host header names a host this server does not answer to (see --allowed-hosts)", typ: "invalid_request_error", code: "host_not_allowed"})
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if !originAllowed(origin, s.cfg.AllowedOrigins) {
			s.fail(w, r, &apiError{status: http.StatusForbidden, message: "cross-origin requests from this origin are not allowed (see --allowed-origins)", typ: "invalid_request_error", code: "origin_not_allowed"})
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return false
		}
	}
	if len(s.cfg.APIKeys) > 0 && r.URL.Path != "/health" && !s.keyOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mlxgo"`)
		s.fail(w, r, &apiError{status: http.StatusUnauthorized, message: "a valid API key is required (Authorization: Bearer KEY or x-api-key: KEY)", typ: "authentication_error", code: "invalid_api_key"})
		return false
	}
	if r.Method == http.MethodPost {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			s.fail(w, r, &apiError{status: http.StatusUnsupportedMediaType, message: fmt.Sprintf("the request body must be JSON sent as Content-Type: application/json (got %q)", r.Header.Get("Content-Type")), typ: "invalid_request_error", code: "unsupported_media_type"})
			return false
		}
	}
	return true
}

// keyOK reports whether r carries one of the API keys, as OpenAI clients
// send it (Authorization: Bearer) or as Anthropic's do (x-api-key).
func (s *Server) keyOK(r *http.Request) bool {
	var got []string
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			got = append(got, strings.TrimSpace(k))
		}
	}
	if k := r.Header.Get("x-api-key"); k != "" {
		got = append(got, k)
	}
	ok := false
	for _, g := range got {
		for _, k := range s.cfg.APIKeys {
			if subtle.ConstantTimeCompare([]byte(g), []byte(k)) == 1 {
				ok = true
			}
		}
	}
	return ok
}

// hostAllowed compares the Host header's host (port dropped) with the
// allow-list, case-insensitively; "*" allows any.
func hostAllowed(hostport string, allowed []string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.Trim(strings.ToLower(h), "[]")
	for _, a := range allowed {
		a = strings.Trim(strings.ToLower(a), "[]")
		if a == "*" || a == h {
			return true
		}
	}
	return false
}

// originAllowed reports whether origin is in the list ("*" allows any).
func originAllowed(origin string, allowed []string) bool {
	return slices.Contains(allowed, "*") || slices.Contains(allowed, strings.TrimSuffix(origin, "/"))
}

// LoopbackHosts are the Host names a server bound to a loopback address
// answers to by default, against DNS rebinding.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// pathRE finds absolute filesystem paths (two or more segments) in text.
var pathRE = regexp.MustCompile(`(^|[\s"'(=:])(/[^/\s"':]+){2,}/?`)

// scrubPaths replaces filesystem paths in a server error's message: no
// response tells a client where the server keeps its files.
func scrubPaths(msg string) string {
	return pathRE.ReplaceAllString(msg, "${1}<path>")
}
