package swarm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/troupe-ml/troupe/internal/httpx"
)

// Serve starts a Server for cfg.Model listening on addr ("127.0.0.1:0"
// picks a free port) and boots its engine, so clients can claim episodes at
// once. It returns the server, the base URL to give NewClient, and stop,
// which shuts the HTTP server down (waiting up to ten seconds for requests
// in flight) and closes the Server (a final checkpoint when
// cfg.CheckpointDir is set). stop may be called more than once; it returns
// the first error of the shutdown, or of serving.
//
// Unset fields of cfg take NewServer's defaults; cmd/troupe serves the same
// way, with the same HTTP timeouts.
func Serve(addr string, cfg ServerConfig) (srv *Server, url string, stop func() error, err error) {
	srv, err = NewServer(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	// Listen before booting: a server that never booted writes no
	// checkpoint when closed.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		return nil, "", nil, fmt.Errorf("swarm: serve %s: %w", cfg.Model.Name(), err)
	}
	if err := srv.Start(); err != nil {
		ln.Close()
		srv.Close()
		return nil, "", nil, err
	}
	hs := srv.HTTPServer()
	served := make(chan error, 1)
	go func() {
		err := hs.Serve(httpx.WrapListener(ln))
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopErr = hs.Shutdown(ctx)
			if err := <-served; stopErr == nil {
				stopErr = err
			}
			if err := srv.Close(); stopErr == nil {
				stopErr = err
			}
		})
		return stopErr
	}
	return srv, "http://" + dialable(ln.Addr()), stop, nil
}

// dialable is addr with an unspecified host (":0", "0.0.0.0", "[::]")
// replaced by the loopback address, so that a client on this machine can
// dial it.
func dialable(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsUnspecified() {
		return addr.String()
	}
	ip := net.IPv6loopback
	if ta.IP.To4() != nil {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port))
}
