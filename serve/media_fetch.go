package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MediaFetch is the policy for media given as http(s) URLs (mlxgo serve
// --allow-media-fetch). Without one (Config.MediaFetch nil) such URLs are
// refused unfetched. With one, the server fetches them itself, with a
// timeout and a size cap, and refuses any host whose name resolves to a
// loopback, private, link-local, unspecified, multicast or otherwise
// non-public address (every address it resolves to is checked, and the
// connection goes to a checked address, so a name cannot re-resolve
// elsewhere in between); redirects are followed only to http(s) URLs and
// pass the same check.
type MediaFetch struct {
	// Timeout bounds one fetch, redirects and body included (0: 10 s).
	Timeout time.Duration
	// MaxBytes caps the body (0: MaxMediaBytes).
	MaxBytes int

	// allow, when set (tests), permits addresses the policy refuses.
	allow func(netip.Addr) bool
	// resolve, when set (tests), replaces DNS resolution.
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// errMediaFetch marks a fetch failure (a 400 naming the URL's problem).
var errMediaFetch = errors.New("media fetch failed")

// blockedPrefixes are address ranges that are not public beyond what
// netip.Addr's predicates cover: this network, shared address space (CGNAT),
// IETF protocol assignments, the documentation and benchmarking ranges,
// reserved space, and IPv6 forms that embed an IPv4 address (IPv4-
// compatible, NAT64, Teredo, 6to4), which could reach a private one.
var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/32", "2001:db8::/32", "2002::/16"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// publicAddr reports whether a is an address a fetch may connect to.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

func (f *MediaFetch) permitted(a netip.Addr) bool {
	return publicAddr(a) || f.allow != nil && f.allow(a.Unmap())
}

// dial resolves host, checks every address, and connects to the first
// permitted one; any refused address refuses the host.
func (f *MediaFetch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if f.resolve != nil {
		addrs, err = f.resolve(ctx, host)
		if err != nil {
			return nil, err
		}
	} else {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		addrs = ips
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s resolves to no address", host)
	}
	for _, a := range addrs {
		if !f.permitted(a) {
			return nil, fmt.Errorf("%w: %s resolves to %s, a private, loopback or otherwise non-public address", errRefusedAddr, host, a)
		}
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// errRefusedAddr is a host the policy does not connect to.
var errRefusedAddr = errors.New("refused")

// fetch gets rawURL's body under the policy. Errors wrap errMediaFetch
// (or are a too-large 400) and name the problem.
func (f *MediaFetch) fetch(rawURL, param string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, badRequest(param, "unsupported media URL: want http(s)://host/... or a data: URL")
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	limit := f.MaxBytes
	if limit <= 0 {
		limit = mediaByteLimit
	}
	tr := &http.Transport{Proxy: nil, DialContext: f.dial, ForceAttemptHTTP2: true, TLSHandshakeTimeout: timeout,
		ResponseHeaderTimeout: timeout, MaxIdleConns: 1, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("more than 5 redirects")
		}
		if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
			return fmt.Errorf("a redirect to a %s: URL", r.URL.Scheme)
		}
		return nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, badRequest(param, "unsupported media URL: %v", err)
	}
	req.Header.Set("User-Agent", "mlxgo-media-fetch")
	host := u.Hostname()
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, errRefusedAddr):
			return nil, badRequest(param, "%v: media URLs may not point at private or loopback addresses", fetchCause(err))
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
			return nil, badRequest(param, "%v: fetching %s timed out after %v", errMediaFetch, host, timeout)
		}
		return nil, badRequest(param, "%v: %s: %v", errMediaFetch, host, fetchCause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, badRequest(param, "%v: %s answered %s", errMediaFetch, host, resp.Status)
	}
	if resp.ContentLength > int64(limit) {
		return nil, badRequest(param, "media too large: %s bytes at the URL (at most %d)", strconv.FormatInt(resp.ContentLength, 10), limit)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
			return nil, badRequest(param, "%v: fetching %s timed out after %v", errMediaFetch, host, timeout)
		}
		return nil, badRequest(param, "%v: %s: %v", errMediaFetch, host, fetchCause(err))
	}
	if len(body) > limit {
		return nil, badRequest(param, "media too large: more than %d bytes at the URL", limit)
	}
	return body, nil
}

// fetchCause strips net/http's wrapping ("Get \"url\": ...") from a
// fetch error, keeping its cause.
func fetchCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
