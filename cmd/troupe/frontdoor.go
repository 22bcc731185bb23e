package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/troupe-ml/troupe/internal/httpx"
)

// bootingHandler answers while the model loads: the port is bound before
// the model boots, so a client learns at once that the server exists.
var bootingHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "5")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"detail":"the model is loading; try again shortly","error":{"message":"the model is loading; try again shortly","type":"server_error","param":null,"code":"loading"}}`+"\n")
})

// door is one bound port: an http.Server that answers with bootingHandler
// until set gives it the real handler.
type door struct {
	ln net.Listener
	hs *http.Server
	h  atomic.Pointer[http.Handler]
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*d.h.Load()).ServeHTTP(w, r) }

// set makes h the door's handler.
func (d *door) set(h http.Handler) { d.h.Store(&h) }

// openDoors binds every port first, so that a taken port fails in
// milliseconds rather than after the models load, and clients get 503
// instead of a refused connection while they do. Serving errors go to
// errc.
func openDoors(host string, ports []int, t httpx.Timeouts, log *slog.Logger, errc chan<- error) ([]*door, error) {
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return openDoorsAt(addrs, t, log, errc)
}

// openDoorsAt is openDoors on listen addresses (host:port).
func openDoorsAt(addrs []string, t httpx.Timeouts, log *slog.Logger, errc chan<- error) ([]*door, error) {
	var doors []*door
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeDoors(doors)
			return nil, err
		}
		ln = httpx.WrapListener(ln) // NewServer refuses requests with both lengths
		d := &door{ln: ln}
		d.set(bootingHandler)
		d.hs = httpx.NewServer(d, t, log)
		go func() {
			if err := d.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		doors = append(doors, d)
	}
	return doors, nil
}

func closeDoors(doors []*door) {
	for _, d := range doors {
		d.hs.Close()
	}
}

// shutdownTimeout bounds draining a front door's requests after SIGTERM,
// within the ten seconds every role has to exit.
const shutdownTimeout = 5 * time.Second

// shutdown drains the doors' requests in flight (streams included, up to
// shutdownTimeout, then cuts them) and then runs each closer, all doors at
// once.
func shutdown(doors []*door, closers []func()) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, d := range doors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d.hs.Shutdown(ctx) != nil {
				d.hs.Close()
			}
			if i < len(closers) && closers[i] != nil {
				closers[i]()
			}
		}()
	}
	wg.Wait()
}

// waitSignal waits for SIGTERM or SIGINT (nil) or a serving error.
func waitSignal(log *slog.Logger, errc <-chan error) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
		return nil
	case err := <-errc:
		return err
	}
}

// startPprof serves net/http/pprof on a loopback address of its own, never
// on the serving ports: profiles reveal memory contents and cost CPU.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, errors.New("--pprof " + addr + ": " + err.Error())
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, errors.New("--pprof " + addr + ": only a loopback address is allowed")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.New("--pprof: " + err.Error())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := httpx.NewServer(mux, httpx.Timeouts{}, log)
	go hs.Serve(ln)
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { hs.Close() }, nil
}

// adminToken reads the admin token from file, or TROUPE_ADMIN_TOKEN when
// file is empty. Both are trimmed; a token of blanks is an error, never an
// open server (an empty variable counts as unset).
func adminToken(file string) (string, error) {
	if file == "" {
		v := os.Getenv("TROUPE_ADMIN_TOKEN")
		if v == "" {
			return "", nil
		}
		if tok := strings.TrimSpace(v); tok != "" {
			return tok, nil
		}
		return "", errors.New("TROUPE_ADMIN_TOKEN is blank: set a token or unset it")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", errors.New("--admin-token-file: " + err.Error())
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("--admin-token-file " + file + " is empty")
	}
	return tok, nil
}
