package httpx

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// WrapListener returns ln with connections that follow the HTTP/1.1
// framing of the requests they carry, so that a server built by NewServer
// can refuse a request carrying both Content-Length and Transfer-Encoding.
// RFC 9112 §6.3 asks a server to treat such a message as an error and
// close the connection (it is how requests are smuggled past a proxy that
// reads the other length); net/http instead drops the Content-Length
// before any handler sees it, answers and keeps the connection. A
// connection that carried one is marked: every request on it is answered
// 400 and the connection is closed after the answer.
func WrapListener(ln net.Listener) net.Listener { return framingListener{ln} }

type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// framingConn watches the bytes read from a connection. net/http reads a
// connection from one goroutine at a time, so the framer needs no lock;
// the mark is read by handlers.
type framingConn struct {
	net.Conn
	f        framer
	smuggled atomic.Bool
}

func (c *framingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.f.feed(b[:n]) {
		c.smuggled.Store(true)
	}
	return n, err
}

// framer states.
const (
	frRequestLine = iota // before a request line (empty lines skipped)
	frHeader             // header lines until the empty one
	frBody               // remain bytes of a Content-Length body
	frChunkSize          // a chunk-size line
	frChunkData          // remain bytes of chunk data
	frChunkEnd           // the CRLF after chunk data
	frTrailer            // trailer lines until the empty one
	frOff                // stopped following: a request net/http refuses itself, or a marked one
)

// maxFramerLine is how much of a line the framer keeps: enough for a
// header's name and a length.
const maxFramerLine = 128

// framer follows request boundaries through the request line, headers,
// and Content-Length or chunked bodies.
type framer struct {
	state  int
	line   []byte
	cl, te bool
	length int64
	remain int64
}

// feed consumes b and reports whether a request with both Content-Length
// and Transfer-Encoding ended its headers.
func (f *framer) feed(b []byte) bool {
	for len(b) > 0 && f.state != frOff {
		switch f.state {
		case frBody, frChunkData:
			n := min(int64(len(b)), f.remain)
			f.remain -= n
			b = b[n:]
			if f.remain == 0 {
				if f.state == frBody {
					f.state = frRequestLine
				} else {
					f.state = frChunkEnd
				}
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if room := maxFramerLine - len(f.line); room > 0 {
			f.line = append(f.line, part[:min(len(part), room)]...)
		}
		if i < 0 {
			return false
		}
		b = b[i+1:]
		line := bytes.TrimSuffix(f.line, []byte("\r"))
		f.line = f.line[:0]
		if f.endLine(line) {
			f.state = frOff
			return true
		}
	}
	return false
}

// endLine handles one complete line; true marks a smuggling attempt.
func (f *framer) endLine(line []byte) bool {
	switch f.state {
	case frRequestLine:
		if len(line) > 0 {
			f.state, f.cl, f.te = frHeader, false, false
		}
	case frHeader:
		if len(line) == 0 {
			return f.endHeaders()
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || name[0] == ' ' || name[0] == '\t' {
			f.state = frOff // net/http answers 400 and closes
			return false
		}
		switch {
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")):
			n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || n < 0 {
				f.state = frOff
				return false
			}
			f.cl, f.length = true, n
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")):
			f.te = true
		}
	case frChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			f.state = frOff
		case n == 0:
			f.state = frTrailer
		default:
			f.state, f.remain = frChunkData, n
		}
	case frChunkEnd:
		f.state = frChunkSize
	case frTrailer:
		if len(line) == 0 {
			f.state = frRequestLine
		}
	}
	return false
}

func (f *framer) endHeaders() bool {
	switch {
	case f.cl && f.te:
		return true
	case f.te:
		f.state = frChunkSize
	case f.cl && f.length > 0:
		f.state, f.remain = frBody, f.length
	default:
		f.state = frRequestLine
	}
	return false
}

type framingKey struct{}

// connContext makes a request's framingConn reachable from its handler.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// refuseSmuggled answers 400 and closes the connection of a request on a
// connection that WrapListener marked.
func refuseSmuggled(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fc, ok := r.Context().Value(framingKey{}).(*framingConn); ok && fc.smuggled.Load() {
			w.Header().Set("Connection", "close")
			RouteError(w, &Error{Status: http.StatusBadRequest, Code: "ambiguous_length",
				Msg: "a request carried both Content-Length and Transfer-Encoding (RFC 9112 §6.3); this connection is closed"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
