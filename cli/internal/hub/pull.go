package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the hub used when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// Sentinel errors, matched with errors.Is, so callers can tell a missing
// repo from a missing credential.
var (
	// ErrNotFound: the repo, revision or file does not exist (or is
	// private and hidden from an anonymous request).
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized: the hub wants a (different) token, or the repo is
	// gated and the token's owner has not accepted its terms.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrVerify: a downloaded file does not have the size or hash the hub
	// announced; it is discarded.
	ErrVerify = errors.New("verification failed")
)

// Client talks to one hub endpoint and writes into one cache.
type Client struct {
	// Endpoint is the hub's base URL, without a trailing slash.
	Endpoint string
	// Token, when set, is sent as "Authorization: Bearer" to the endpoint
	// (never to the CDN a large file redirects to: net/http drops the
	// header on a redirect to another host).
	Token string
	// CacheDir is the hub cache folder files are written to.
	CacheDir string
	// HTTP is the client used (nil: a default one without a global timeout,
	// since model files take minutes).
	HTTP *http.Client
	// Retries is how many times a broken download is resumed before
	// giving up.
	Retries int
	// RetryDelay is the first pause between attempts; it doubles each time.
	RetryDelay time.Duration
}

// NewClient configures a client from the environment, as huggingface_hub
// does: HF_ENDPOINT, HF_TOKEN (else the token file HF_TOKEN_PATH or
// $HF_HOME/token), and the cache folder of CacheDir.
func NewClient() *Client {
	c := &Client{
		Endpoint:   strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/"),
		Token:      strings.TrimSpace(os.Getenv("HF_TOKEN")),
		CacheDir:   CacheDir(),
		Retries:    5,
		RetryDelay: 500 * time.Millisecond,
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.Token == "" {
		p := os.Getenv("HF_TOKEN_PATH")
		if p == "" {
			p = filepath.Join(HomeDir(), "token")
		}
		if b, err := os.ReadFile(expandHome(p)); err == nil {
			c.Token = strings.TrimSpace(string(b))
		}
	}
	return c
}

// Options select what Pull fetches.
type Options struct {
	// Revision is a branch, tag or commit ("": main).
	Revision string
	// Include, when not empty, keeps only files matching one of these
	// fnmatch-style globs ("*" also crosses "/", as in huggingface_hub).
	Include []string
	// Exclude drops files matching one of these globs.
	Exclude []string
	// Progress receives a progress display (nil: none). With TTY it is one
	// line redrawn in place; otherwise one line per finished file.
	Progress io.Writer
	// TTY says Progress is a terminal, where a line can be redrawn.
	TTY bool
}

// Result describes a finished pull.
type Result struct {
	// Snapshot is the folder holding the repo's files at Commit: pass it
	// to model.Load.
	Snapshot string
	// Commit is the revision's commit hash (the snapshot folder's name).
	Commit string
	// Files are the repo paths now present in the snapshot.
	Files []string
	// Downloaded counts bytes fetched over the network by this call.
	Downloaded int64
}

type sibling struct {
	RFilename string `json:"rfilename"`
	Size      *int64 `json:"size"`
	BlobID    string `json:"blobId"`
	LFS       *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

type repoInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

var repoIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$`)

// ValidRepoID reports whether s is a hub repo id ("name" or "org/name").
func ValidRepoID(s string) bool {
	return repoIDRe.MatchString(s) && !strings.Contains(s, "..") && !strings.Contains(s, "--")
}

// Pull downloads a model repo into the cache and returns its snapshot.
// Files already in the cache (same blob) are not fetched again; a partial
// download (blobs/<etag>.incomplete, left by an interrupted pull) resumes
// with a Range request; every file is checked against the size and hash
// the hub announces (sha256 for LFS files, the git blob id otherwise).
func (c *Client) Pull(ctx context.Context, repo string, o Options) (*Result, error) {
	if !ValidRepoID(repo) {
		return nil, fmt.Errorf("%q is not a repo id (want org/name)", repo)
	}
	rev := o.Revision
	if rev == "" {
		rev = "main"
	}
	inc, err := compileGlobs(o.Include)
	if err != nil {
		return nil, err
	}
	exc, err := compileGlobs(o.Exclude)
	if err != nil {
		return nil, err
	}
	info, err := c.repoInfo(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	if !isHex(info.SHA, 40) {
		return nil, fmt.Errorf("repo %s: the hub gave no commit hash for revision %q", repo, rev)
	}
	var files []sibling
	for _, s := range info.Siblings {
		if !safeRepoPath(s.RFilename) {
			return nil, fmt.Errorf("repo %s: refusing unsafe file path %q", repo, s.RFilename)
		}
		if (len(inc) > 0 && !anyMatch(inc, s.RFilename)) || anyMatch(exc, s.RFilename) {
			continue
		}
		files = append(files, s)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("repo %s at %s: no files to download (after --include/--exclude)", repo, rev)
	}
	repoDir := filepath.Join(c.CacheDir, RepoFolder(repo))
	snap := filepath.Join(repoDir, "snapshots", info.SHA)
	blobs := filepath.Join(repoDir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	pr := newProgress(o.Progress, o.TTY, len(files))
	defer pr.finish()
	res := &Result{Snapshot: snap, Commit: info.SHA}
	for _, s := range files {
		pr.startFile(s.RFilename, expectedSize(s))
		n, err := c.pullFile(ctx, repo, info.SHA, s, blobs, snap, pr)
		res.Downloaded += n
		if err != nil {
			return res, fmt.Errorf("%s: %w", s.RFilename, err)
		}
		pr.endFile()
		res.Files = append(res.Files, s.RFilename)
	}
	if rev != info.SHA {
		ref := filepath.Join(repoDir, "refs", filepath.FromSlash(rev))
		if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
			return res, err
		}
		if err := os.WriteFile(ref, []byte(info.SHA), 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}

func expectedSize(s sibling) int64 {
	switch {
	case s.LFS != nil && s.LFS.Size > 0:
		return s.LFS.Size
	case s.Size != nil:
		return *s.Size
	}
	return -1
}

// safeRepoPath refuses paths that would land outside the snapshot.
func safeRepoPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("User-Agent", "mlxgo")
	// Identity encoding: sizes and Range offsets are the file's bytes.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// httpError turns a failed response into an error naming the cause.
func (c *Client) httpError(resp *http.Response, what string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	var j struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil && j.Error != "" {
		msg = j.Error
	}
	if msg != "" {
		msg = ": " + msg
	}
	code := resp.Header.Get("X-Error-Code")
	hint := ""
	if c.Token == "" {
		hint = " (if it is private or gated, set HF_TOKEN)"
	}
	auth := resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden
	switch {
	case code == "GatedRepo":
		return fmt.Errorf("%s: %w: the repo is gated; accept its terms on the hub with the token's account%s", what, ErrUnauthorized, msg)
	case auth && c.Token != "":
		return fmt.Errorf("%s: %w (HTTP %d%s): the hub rejected HF_TOKEN", what, ErrUnauthorized, resp.StatusCode, msg)
	case auth && code == "RepoNotFound":
		// The hub answers this way for a missing repo and for a private
		// one alike, so as not to reveal which.
		return fmt.Errorf("%s: %w or %w (HTTP %d%s): if it is private or gated, set HF_TOKEN to a hub access token", what, ErrNotFound, ErrUnauthorized, resp.StatusCode, msg)
	case auth:
		return fmt.Errorf("%s: %w (HTTP %d%s): set HF_TOKEN to a hub access token", what, ErrUnauthorized, resp.StatusCode, msg)
	case code == "RepoNotFound" || code == "RevisionNotFound" || code == "EntryNotFound" || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s: %w (HTTP %d%s)%s", what, ErrNotFound, resp.StatusCode, msg, hint)
	}
	return &statusError{what: what, code: resp.StatusCode, msg: msg}
}

// statusError is an unexpected HTTP status; 5xx and 429 are retried.
type statusError struct {
	what string
	code int
	msg  string
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: HTTP %d%s", e.what, e.code, e.msg) }

func (c *Client) repoInfo(ctx context.Context, repo, rev string) (*repoInfo, error) {
	u := c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
	req, err := c.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("repo %s: %w", repo, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.httpError(resp, "repo "+repo+" at "+rev)
	}
	var info repoInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("repo %s: bad answer from %s: %w", repo, c.Endpoint, err)
	}
	return &info, nil
}

// fileMeta is what the resolve endpoint's headers say about a file.
type fileMeta struct {
	etag   string
	size   int64 // -1: unknown
	linked bool  // an LFS file (X-Linked-Etag): etag is its sha256
	url    string
}

func normEtag(s string) string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	return strings.Trim(s, `"`)
}

// headFile asks for a file's metadata without following the redirect to
// the CDN (its headers are the hub's X-Linked-* ones); relative redirects
// (a renamed repo) are followed.
func (c *Client) headFile(ctx context.Context, u string) (*fileMeta, error) {
	hc := *c.httpClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for hops := 0; hops < 5; hops++ {
		req, err := c.newRequest(ctx, http.MethodHead, u)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("X-Linked-Etag") == "" {
			loc, err := resp.Location()
			if err != nil {
				return nil, err
			}
			base, _ := url.Parse(u)
			if loc.Host == base.Host {
				u = loc.String()
				continue
			}
		}
		if resp.StatusCode >= 400 {
			return nil, c.httpError(resp, "HEAD "+u)
		}
		m := &fileMeta{size: -1, url: u}
		if e := resp.Header.Get("X-Linked-Etag"); e != "" {
			m.etag, m.linked = normEtag(e), true
		} else {
			m.etag = normEtag(resp.Header.Get("ETag"))
		}
		for _, h := range []string{"X-Linked-Size", "Content-Length"} {
			if v := resp.Header.Get(h); v != "" {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
					m.size = n
					break
				}
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("HEAD %s: too many redirects", u)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// pullFile makes snapshots/<commit>/<path> point at a verified blob,
// downloading it unless the cache has it. It returns the bytes fetched.
func (c *Client) pullFile(ctx context.Context, repo, commit string, s sibling, blobs, snap string, pr *progress) (int64, error) {
	u := c.Endpoint + "/" + repo + "/resolve/" + commit + "/" + escapePath(s.RFilename)
	meta, err := c.headFile(ctx, u)
	if err != nil {
		return 0, err
	}
	if meta.etag == "" || strings.ContainsAny(meta.etag, `/\`) || meta.etag == "." || meta.etag == ".." {
		return 0, fmt.Errorf("the hub gave no usable ETag for %s", u)
	}
	size := meta.size
	if want := expectedSize(s); want >= 0 {
		if size >= 0 && size != want {
			return 0, fmt.Errorf("%w: the hub announces %d bytes in the file list but %d in the headers", ErrVerify, want, size)
		}
		size = want
	}
	pr.setSize(size)
	// The digests to check: the file list's, else what the etag is.
	var wantSHA256, wantGit string
	if s.LFS != nil && isHex(s.LFS.SHA256, 64) {
		wantSHA256 = strings.ToLower(s.LFS.SHA256)
	} else if meta.linked && isHex(meta.etag, 64) {
		wantSHA256 = strings.ToLower(meta.etag)
	}
	if s.LFS == nil && !meta.linked && isHex(s.BlobID, 40) {
		wantGit = strings.ToLower(s.BlobID)
	}
	blob := filepath.Join(blobs, meta.etag)
	var fetched int64
	if st, err := os.Stat(blob); err != nil || (size >= 0 && st.Size() != size) {
		fetched, err = c.download(ctx, meta.url, blob, size, pr)
		if err != nil {
			return fetched, err
		}
		if err := verify(blob+".incomplete", size, wantSHA256, wantGit); err != nil {
			os.Remove(blob + ".incomplete")
			return fetched, err
		}
		if err := os.Rename(blob+".incomplete", blob); err != nil {
			return fetched, err
		}
	} else {
		pr.markCached(st.Size())
	}
	link := filepath.Join(snap, filepath.FromSlash(s.RFilename))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fetched, err
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return fetched, err
	}
	if cur, err := os.Readlink(link); err == nil && cur == rel {
		return fetched, nil
	}
	os.Remove(link)
	return fetched, os.Symlink(rel, link)
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// verify checks a downloaded file's size and digests.
func verify(p string, size int64, wantSHA256, wantGit string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if size >= 0 && st.Size() != size {
		return fmt.Errorf("%w: got %d bytes, the hub announced %d", ErrVerify, st.Size(), size)
	}
	var hs []io.Writer
	var h256, hgit hash.Hash
	if wantSHA256 != "" {
		h256 = sha256.New()
		hs = append(hs, h256)
	}
	if wantGit != "" {
		hgit = sha1.New()
		fmt.Fprintf(hgit, "blob %d\x00", st.Size())
		hs = append(hs, hgit)
	}
	if len(hs) == 0 {
		return nil
	}
	if _, err := io.Copy(io.MultiWriter(hs...), f); err != nil {
		return err
	}
	if h256 != nil {
		if got := hex.EncodeToString(h256.Sum(nil)); got != wantSHA256 {
			return fmt.Errorf("%w: sha256 %s, the hub announced %s", ErrVerify, got, wantSHA256)
		}
	}
	if hgit != nil {
		if got := hex.EncodeToString(hgit.Sum(nil)); got != wantGit {
			return fmt.Errorf("%w: git blob id %s, the hub announced %s", ErrVerify, got, wantGit)
		}
	}
	return nil
}

// errRetry marks a failure worth resuming after (a dropped connection, a
// short body, a server error).
type errRetry struct{ err error }

func (e errRetry) Error() string { return e.err.Error() }
func (e errRetry) Unwrap() error { return e.err }

// download fills blob+".incomplete", resuming what is there, retrying
// broken transfers. It returns the bytes fetched.
func (c *Client) download(ctx context.Context, u, blob string, size int64, pr *progress) (int64, error) {
	var total int64
	delay := c.RetryDelay
	for attempt := 0; ; attempt++ {
		n, err := c.fetchOnce(ctx, u, blob+".incomplete", size, pr)
		total += n
		var re errRetry
		if err == nil || !errors.As(err, &re) || attempt >= c.Retries || ctx.Err() != nil {
			if re.err != nil && err != nil {
				err = re.err
			}
			return total, err
		}
		pr.note(fmt.Sprintf("retrying after: %v", re.err))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return total, ctx.Err()
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// fetchOnce makes one request for the bytes tmp lacks and appends them.
func (c *Client) fetchOnce(ctx context.Context, u, tmp string, size int64, pr *progress) (int64, error) {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	off := st.Size()
	if size >= 0 && off > size {
		off = 0
	}
	pr.setDone(off)
	if size >= 0 && off == size {
		return 0, nil
	}
	req, err := c.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return 0, err
	}
	if off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, errRetry{err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && off > 0:
		if cr := resp.Header.Get("Content-Range"); !strings.HasPrefix(cr, fmt.Sprintf("bytes %d-", off)) {
			return 0, fmt.Errorf("resume at %d: the server answered range %q", off, cr)
		}
	case resp.StatusCode == http.StatusOK:
		off = 0 // no range support: start over
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		f.Truncate(0)
		return 0, errRetry{fmt.Errorf("resume at %d refused (HTTP 416); restarting", off)}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return 0, errRetry{c.httpError(resp, "GET "+u)}
	default:
		return 0, c.httpError(resp, "GET "+u)
	}
	if err := f.Truncate(off); err != nil {
		return 0, err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	pr.setDone(off)
	n, err := io.Copy(f, &countingReader{r: resp.Body, pr: pr})
	if err != nil {
		return n, errRetry{err}
	}
	if size >= 0 && off+n != size {
		return n, errRetry{fmt.Errorf("got %d of %d bytes", off+n, size)}
	}
	return n, nil
}

type countingReader struct {
	r  io.Reader
	pr *progress
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.pr.add(int64(n))
	return n, err
}

// glob is a compiled fnmatch pattern.
type glob = *regexp.Regexp

// compileGlobs turns fnmatch patterns (*, ?, [set], [!set]) into regexps;
// as in Python's fnmatch, "*" matches "/" too.
func compileGlobs(pats []string) ([]glob, error) {
	var out []glob
	for _, p := range pats {
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch ch := p[i]; ch {
			case '*':
				b.WriteString(".*")
			case '?':
				b.WriteString(".")
			case '[':
				j := strings.IndexByte(p[i+1:], ']')
				if j < 0 {
					b.WriteString(`\[`)
					continue
				}
				set := p[i+1 : i+1+j]
				if strings.HasPrefix(set, "!") {
					set = "^" + set[1:]
				}
				b.WriteString("[" + strings.ReplaceAll(set, `\`, `\\`) + "]")
				i += j + 1
			default:
				b.WriteString(regexp.QuoteMeta(string(ch)))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf("bad glob %q: %v", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

func anyMatch(gs []glob, name string) bool {
	for _, g := range gs {
		if g.MatchString(name) {
			return true
		}
	}
	return false
}
