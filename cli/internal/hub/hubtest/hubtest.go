// Package hubtest is a fake Hugging Face hub for tests: the two endpoints
// a pull uses (the revision API and resolve, with the LFS redirect to a
// CDN), bearer-token checks, Range requests, and switches to break a
// download midway or announce a wrong hash. It listens on loopback only.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"
)

// File is one file of a fake repo.
type File struct {
	Data []byte
	// LFS files are announced with an lfs block and served through a
	// redirect to /cdn/<sha256>, with X-Linked-Etag and X-Linked-Size.
	LFS bool
	// WrongSHA announces a sha256 (or git blob id) that the content does
	// not have.
	WrongSHA bool
	// CutAfter > 0 breaks the first CutTimes full GETs of the content after
	// that many bytes (the connection is dropped).
	CutAfter, CutTimes int
}

// Repo is a fake model repo.
type Repo struct {
	Commit string // 40 hex digits (default: derived from the id)
	Files  map[string]*File
	// Private repos need the hub's token.
	Private bool
}

// Hub is the fake hub.
type Hub struct {
	*httptest.Server
	// Token is what private repos require as "Authorization: Bearer".
	Token string
	mu    sync.Mutex
	repos map[string]*Repo
	// Log records "METHOD path [Range]" of every request.
	log []string
	// cuts counts the broken GETs per file.
	cuts map[*File]int
}

// New starts a hub serving repos (keys "org/name").
func New(repos map[string]*Repo) *Hub {
	h := &Hub{repos: repos, cuts: map[*File]int{}}
	for id, r := range repos {
		if r.Commit == "" {
			sum := sha1.Sum([]byte("commit:" + id))
			r.Commit = hex.EncodeToString(sum[:])
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/{org}/{name}/revision/{rev}", h.revision)
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		// /{org}/{name}/resolve/{rev}/{path...}, which ServeMux cannot
		// register beside the API route.
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
		if len(parts) < 5 || parts[2] != "resolve" {
			http.NotFound(w, r)
			return
		}
		r.SetPathValue("org", parts[0])
		r.SetPathValue("name", parts[1])
		r.SetPathValue("rev", parts[3])
		r.SetPathValue("path", parts[4])
		h.resolve(w, r)
	})
	mux.HandleFunc("GET /cdn/{sha}", h.cdn)
	h.Server = httptest.NewServer(h.logged(mux))
	return h
}

// Requests returns the request log so far.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...)
}

func (h *Hub) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + r.URL.Path
		if rg := r.Header.Get("Range"); rg != "" {
			line += " " + rg
		}
		h.mu.Lock()
		h.log = append(h.log, line)
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (h *Hub) lookup(w http.ResponseWriter, r *http.Request) *Repo {
	id := r.PathValue("org") + "/" + r.PathValue("name")
	repo := h.repos[id]
	if repo == nil {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
		return nil
	}
	if repo.Private && r.Header.Get("Authorization") != "Bearer "+h.Token {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, `{"error":"Invalid credentials in Authorization header"}`, http.StatusUnauthorized)
		return nil
	}
	if rev := r.PathValue("rev"); rev != "main" && rev != repo.Commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, `{"error":"Invalid rev id"}`, http.StatusNotFound)
		return nil
	}
	return repo
}

// SHA256 is the hex sha256 of data.
func SHA256(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// GitBlobID is git's object id of a blob with this content.
func GitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func (f *File) announced() string {
	var s string
	if f.LFS {
		s = SHA256(f.Data)
	} else {
		s = GitBlobID(f.Data)
	}
	if f.WrongSHA {
		s = strings.Repeat("0", len(s))
	}
	return s
}

func (h *Hub) revision(w http.ResponseWriter, r *http.Request) {
	repo := h.lookup(w, r)
	if repo == nil {
		return
	}
	type lfs struct {
		SHA256 string `json:"sha256"`
		Size   int    `json:"size"`
	}
	type sib struct {
		RFilename string `json:"rfilename"`
		Size      int    `json:"size"`
		BlobID    string `json:"blobId"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	out := struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []sib  `json:"siblings"`
	}{ID: r.PathValue("org") + "/" + r.PathValue("name"), SHA: repo.Commit}
	names := make([]string, 0, len(repo.Files))
	for n := range repo.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := repo.Files[n]
		s := sib{RFilename: n, Size: len(f.Data), BlobID: GitBlobID(f.Data)}
		if f.LFS {
			s.LFS = &lfs{SHA256: f.announced(), Size: len(f.Data)}
		} else {
			s.BlobID = f.announced()
		}
		out.Siblings = append(out.Siblings, s)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (h *Hub) resolve(w http.ResponseWriter, r *http.Request) {
	repo := h.lookup(w, r)
	if repo == nil {
		return
	}
	f := repo.Files[r.PathValue("path")]
	if f == nil {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, `{"error":"Entry not found"}`, http.StatusNotFound)
		return
	}
	w.Header().Set("X-Repo-Commit", repo.Commit)
	if f.LFS {
		w.Header().Set("X-Linked-Etag", `"`+f.announced()+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(f.Data)))
		w.Header().Set("ETag", `"`+GitBlobID([]byte("pointer"))+`"`)
		http.Redirect(w, r, "/cdn/"+SHA256(f.Data), http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+f.announced()+`"`)
	h.serve(w, r, f)
}

func (h *Hub) cdn(w http.ResponseWriter, r *http.Request) {
	for _, repo := range h.repos {
		for _, f := range repo.Files {
			if f.LFS && SHA256(f.Data) == r.PathValue("sha") {
				// The CDN ignores the hub's token; it must not be sent here
				// across hosts, but on loopback the host is the same.
				h.serve(w, r, f)
				return
			}
		}
	}
	http.NotFound(w, r)
}

// serve answers GET and HEAD with Range support, breaking the first
// CutTimes full downloads when asked.
func (h *Hub) serve(w http.ResponseWriter, r *http.Request, f *File) {
	if r.Method == http.MethodGet && f.CutAfter > 0 && r.Header.Get("Range") == "" {
		h.mu.Lock()
		cut := h.cuts[f] < f.CutTimes
		if cut {
			h.cuts[f]++
		}
		h.mu.Unlock()
		if cut {
			w.Header().Set("Content-Length", fmt.Sprint(len(f.Data)))
			w.WriteHeader(http.StatusOK)
			w.Write(f.Data[:f.CutAfter])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drops the connection mid-body
		}
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.Data))
}
