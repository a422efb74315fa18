// Package ops serves the operational endpoints of every orderly process:
// GET /healthz (liveness), GET /readyz (readiness, with a JSON body naming
// each check) and GET /metrics (Prometheus; loopback clients only, or
// anyone with the metrics token), HEAD wherever GET is served.
// The API mounts the same handler, so every process answers them alike.
//
// It must not import NATS or the components it checks: checks are functions.
package ops

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderly-dev/orderly/internal/problem"
)

// Check is one readiness check: nil when the process can do that part of its
// job now.
type Check struct {
	// Name names the check in the /readyz body, such as "nats".
	Name string
	// Run runs the check within ctx's deadline.
	Run func(ctx context.Context) error
}

// Config configures the handler. Zero fields take defaults.
type Config struct {
	// CheckTimeout bounds all readiness checks together (default 2s).
	CheckTimeout time.Duration
	// MetricsToken, when set, is the bearer token /metrics asks every
	// client for. Without it /metrics answers loopback clients only: its
	// counts tell anyone who reaches the port how much business goes
	// through it.
	MetricsToken string
}

func (c *Config) setDefaults() {
	if c.CheckTimeout == 0 {
		c.CheckTimeout = 2 * time.Second
	}
}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	if c.CheckTimeout <= 0 {
		return fmt.Errorf("ops: check timeout must be positive, got %s", c.CheckTimeout)
	}
	return nil
}

// Paths served by Handler.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"
)

// Handler serves the operational endpoints.
type Handler struct {
	cfg     Config
	checks  []Check
	live    []Check
	metrics http.Handler
	// token is the metrics token: cfg.MetricsToken, then what
	// SetMetricsToken set.
	token atomic.Pointer[string]
	mux   *http.ServeMux
}

// NewHandler returns the handler; ready are the readiness checks, live the
// liveness checks (a failing one means the process cannot recover on its own
// and should be restarted), gatherer is what /metrics serves.
func NewHandler(cfg Config, ready, live []Check, gatherer prometheus.Gatherer) (*Handler, error) {
	cfg.setDefaults()
	errs := []error{cfg.Validate()}
	if gatherer == nil {
		errs = append(errs, errors.New("ops: nil gatherer"))
	}
	for _, c := range append(append([]Check(nil), ready...), live...) {
		if c.Name == "" || c.Run == nil {
			errs = append(errs, errors.New("ops: a check needs a name and a function"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, checks: ready, live: live, metrics: promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}), mux: http.NewServeMux()}
	h.token.Store(&cfg.MetricsToken)
	h.mux.HandleFunc("GET "+HealthzPath, h.healthz) // GET patterns match HEAD too
	h.mux.HandleFunc("GET "+ReadyzPath, h.readyz)
	h.mux.HandleFunc("GET "+MetricsPath, h.serveMetrics)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		write(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "Not found", "no resource at "+problem.Quoted(r.URL.Path)))
	})
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// serveMetrics serves /metrics to a client with the metrics token, or to a
// loopback client when there is none.
func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if token := *h.token.Load(); token != "" {
		if got, ok := BearerToken(r.Header.Get("Authorization")); !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderly-metrics"`)
			write(w, problem.New(http.StatusUnauthorized, problem.CodeUnauthorized, "Unauthorized", "send Authorization: Bearer <the token of --metrics-token-file>"))
			return
		}
	} else if !fromLoopback(r) {
		write(w, problem.New(http.StatusForbidden, problem.CodeForbidden, "Forbidden",
			"/metrics answers loopback clients only: start orderly with --metrics-token-file and give Prometheus that bearer token"))
		return
	}
	h.metrics.ServeHTTP(w, r)
}

// BearerToken is the token of an Authorization header value of the Bearer
// scheme (RFC 6750; the scheme's name in any case, one space); ok is false
// for any other value or an empty token.
func BearerToken(auth string) (token string, ok bool) {
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return "", false
	}
	return auth[len(prefix):], true
}

// SetMetricsToken replaces the metrics token (a token file read again);
// requests from then on need the new one. Empty is refused: a reload never
// opens /metrics.
func (h *Handler) SetMetricsToken(token string) error {
	if token == "" {
		return errors.New("ops: an empty metrics token")
	}
	h.token.Store(&token)
	return nil
}

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if results, ok := run(r.Context(), h.cfg.CheckTimeout, h.live); !ok {
		p := problem.New(http.StatusServiceUnavailable, problem.CodeNotLive, "Not live", "the process cannot recover on its own: restart it")
		p.Checks = results
		write(w, p)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// Ready runs every readiness check at once and returns each one's result
// ("ok" or the error) and whether all passed.
func (h *Handler) Ready(ctx context.Context) (map[string]string, bool) {
	return run(ctx, h.cfg.CheckTimeout, h.checks)
}

func run(ctx context.Context, timeout time.Duration, checks []Check) (map[string]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(map[string]string, len(checks))
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := true
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Run(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				results[c.Name] = err.Error()
				ok = false
				return
			}
			results[c.Name] = "ok"
		}()
	}
	wg.Wait()
	return results, ok
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	results, ok := h.Ready(r.Context())
	if !ok {
		p := problem.New(http.StatusServiceUnavailable, problem.CodeNotReady, "Not ready", "a readiness check failed; see checks")
		p.Checks = results
		w.Header().Set("Retry-After", "1")
		write(w, p)
		return
	}
	b, _ := json.Marshal(struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}{"ready", results})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

func write(w http.ResponseWriter, p *problem.Problem) {
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.JSON())
}

// CheckCollector exports the checks as orderly_check_ok{check, kind} (1 ok,
// 0 failing), running them when Prometheus scrapes, within timeout: an alert
// on readiness needs no probe of its own.
func CheckCollector(ready, live []Check, timeout time.Duration) prometheus.Collector {
	return &checkCollector{ready: ready, live: live, timeout: timeout,
		desc: prometheus.NewDesc("orderly_check_ok", "Whether a readiness (kind=ready) or liveness (kind=live) check passes now (1) or not (0).",
			[]string{"check", "kind"}, nil)}
}

type checkCollector struct {
	ready, live []Check
	timeout     time.Duration
	desc        *prometheus.Desc
}

func (c *checkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *checkCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, checks := range map[string][]Check{"ready": c.ready, "live": c.live} {
		results, _ := run(context.Background(), c.timeout, checks)
		for name, result := range results {
			v := 0.0
			if result == "ok" {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, name, kind)
		}
	}
}
