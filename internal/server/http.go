package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"

	"github.com/orderly-dev/orderly/internal/ops"
)

// serveHTTP serves h on the configured HTTP address until Shutdown.
func (s *Server) serveHTTP(h http.Handler) error {
	ln, err := listenHTTP(s.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	limit := s.cfg.HTTP.maxConns()
	ln = netutil.LimitListener(ln, limit)
	s.httpLn = ln
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "orderly_http_open_connections", Help: "Open HTTP connections."})
	s.registry.MustRegister(open, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "orderly_http_connection_limit",
		Help: "Most HTTP connections open at once; more wait in the listen queue."}, func() float64 { return float64(limit) }))
	// ReadTimeout bounds a request whose body no handler of ours reads
	// (net/http answers OPTIONS * itself, reading its body); bodyDeadline
	// sets the real deadlines, and lifts them once the body is in, so that
	// long polls are not cut short. No WriteTimeout: it would cut them short.
	s.http = &http.Server{
		Handler:           bodyDeadline(h, s.cfg.HTTP.BodyTimeout),
		ReadHeaderTimeout: s.cfg.HTTP.HeaderTimeout,
		ReadTimeout:       s.cfg.HTTP.HeaderTimeout + s.cfg.HTTP.BodyTimeout,
		IdleTimeout:       s.cfg.HTTP.IdleTimeout,
		MaxHeaderBytes:    s.cfg.HTTP.MaxHeaderBytes,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				open.Inc()
			case http.StateClosed, http.StateHijacked:
				open.Dec()
			}
		},
	}
	// Said before the first request can be answered.
	if s.cfg.anonymousBeyondLoopback() {
		s.logger.Warn("the API takes orders without tokens from every host that reaches its address (anonymous clients allowed)", "addr", ln.Addr().String())
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.failed <- fmt.Errorf("http: %w", err)
		}
	}()
	s.logger.Info("HTTP listening", "addr", ln.Addr().String(), "api", s.cfg.Roles.API, "max_conns", limit)
	return nil
}

// startPprof serves the profiling endpoints on their own listener.
func (s *Server) startPprof(addr string) error {
	srv, bound, err := ops.ServePprof(addr)
	if err != nil {
		return err
	}
	s.pprof = srv
	s.logger.Info("pprof listening", "addr", bound.String())
	return nil
}

// bodyDeadline gives a request's body BodyTimeout to arrive, and lifts the
// connection's read deadline once it has (or at once when there is none), so
// that a handler may then wait as long as it likes: the server's watch for a
// client that hangs up reads on with no deadline.
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(timeout))
			r.Body = &liftAtEOF{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		h.ServeHTTP(w, r)
	})
}

// liftAtEOF calls lift once, when the body has been read to its end.
type liftAtEOF struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// listenHTTP listens on addr, the HTTP port of every role, or says which
// flag to change.
func listenHTTP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("HTTP: cannot listen on %s (another orderly or server? set --http-addr): %w", addr, err)
	}
	return ln, nil
}

// checkHTTPAddr fails at once when the HTTP port cannot be had, before the
// embedded server and its data directory are created: the port is taken
// again once the process is ready to serve. A port that another process
// takes in between still fails then.
func checkHTTPAddr(addr string) error {
	ln, err := listenHTTP(addr)
	if err != nil {
		return err
	}
	return ln.Close()
}
