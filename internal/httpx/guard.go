package httpx

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// GuardConfig configures Guard.
type GuardConfig struct {
	// Hosts are the host names (no port) a request arriving on a loopback
	// address may name in its Host header besides IP literals and
	// "localhost" (a --public-url's host, a name the server is reached by
	// through a proxy), and the names an Origin other than the request's
	// own may carry. Case does not matter.
	Hosts []string
}

// Guard protects a server that browsers can reach, above all a token-less
// one on a loopback address, from other web pages:
//
//   - DNS rebinding: a request that arrived on a loopback address must name
//     the server in Host by an IP literal, localhost, or one of
//     GuardConfig.Hosts; otherwise 421. A page whose own name was
//     rebound to 127.0.0.1 sends its own name, which is refused. Requests
//     on other addresses are reached from the network, where the server
//     needs a token anyway, and are not checked (their Host is whatever
//     name the clients use).
//   - Cross-site requests: an Origin header, when sent, must be the
//     request's own origin (Origin's host equals Host) or name one of
//     GuardConfig.Hosts; otherwise 403.
//
// RequireJSON guards the state-changing endpoints against form posts.
// Requests that did not arrive over a connection (a handler called with a
// test recorder) carry no local address and are passed through.
func Guard(h http.Handler, cfg GuardConfig) http.Handler {
	hosts := make([]string, 0, len(cfg.Hosts))
	for _, n := range cfg.Hosts {
		if n = strings.ToLower(strings.Trim(strings.TrimSpace(n), "[]")); n != "" {
			hosts = append(hosts, n)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		if e := guardCheck(r, local, hosts); e != nil {
			RouteError(w, e)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func guardCheck(r *http.Request, local net.Addr, hosts []string) *Error {
	if ta, ok := local.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		if name := hostName(r.Host); name != "" && !loopbackName(name) && !slices.Contains(hosts, name) {
			return &Error{Status: http.StatusMisdirectedRequest, Code: "host_not_allowed",
				Msg: fmt.Sprintf("Host %q does not name this server: on a loopback address it answers to IP addresses, localhost and its configured names (--public-url), which keeps other web pages out (DNS rebinding)", clip(r.Host))}
		}
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) && !slices.Contains(hosts, strings.ToLower(u.Hostname())) {
			return &Error{Status: http.StatusForbidden, Code: "origin_not_allowed",
				Msg: fmt.Sprintf("Origin %q is not this server's: requests from other web pages are refused", clip(o))}
		}
	}
	return nil
}

// RequireJSON refuses a POST, PUT, PATCH or DELETE without Content-Type
// application/json with 415, for the endpoints that change state: a
// cross-site page cannot send that type without a CORS preflight, which a
// troupe server never grants, so a form's text/plain, urlencoded or
// multipart post (or a body-less fetch) is refused before it acts. Like
// Guard, it passes requests that did not arrive over a connection.
func RequireJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			switch r.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
					RouteError(w, &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
						Msg: fmt.Sprintf("%s %s changes state and needs Content-Type: application/json (got %q)", r.Method, r.URL.Path, clip(r.Header.Get("Content-Type")))})
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// hostName is the lower-cased name of a Host header, without port or
// IPv6 brackets.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.Trim(host, "[]"))
}

// loopbackName reports whether a host name cannot be rebound by DNS: an IP
// literal or localhost.
func loopbackName(name string) bool {
	return name == "localhost" || net.ParseIP(name) != nil
}

// clip bounds a client-supplied value quoted in an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// URLHosts returns the host names of the URLs among urls (those that
// parse and have a host), for GuardConfig.Hosts.
func URLHosts(urls ...string) []string {
	var out []string
	for _, s := range urls {
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			out = append(out, u.Hostname())
		}
	}
	return out
}
