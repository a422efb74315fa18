// Package api is orderly's HTTP layer (gin). It only translates: it parses and
// validates headers and bodies, computes the key hash and the request
// fingerprint (package idempotency), calls the use cases (package
// internal/app), and maps their outcomes and errors to statuses and RFC 9457
// problem documents.
//
// It may import events, idempotency, internal/app and internal/problem; it
// must not import NATS, watermill or the adapters.
package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/problem"
)

// DefaultTenant owns every request when no tokens are configured.
const DefaultTenant = "default"

// Config configures the HTTP layer.
type Config struct {
	// BodyLimit is the largest request body accepted, in bytes (413 above).
	BodyLimit int64
	// Wait is how long POST /v1/orders waits for the decision before it answers
	// 202, when the client states no preference.
	Wait time.Duration
	// MaxWait caps the client's Prefer: wait=N and GET ?wait=.
	MaxWait time.Duration
	// Tokens maps bearer tokens to tenants. Empty: no authentication, and every
	// request belongs to DefaultTenant.
	Tokens map[string]string
	// Tracer, when set, starts a server span per request, the child of the
	// request's traceparent when it has one; the span's context travels with
	// the command (internal/tracing).
	Tracer trace.Tracer
	// DecisionDelay, when set, says how long a command stored now may wait
	// for its decision: the decision lag while the processor pauses for a
	// burst (ADR 0015), else 0. The Retry-After of a 202, of a 409 for a
	// pending original and of a pending order says it in whole seconds
	// (rounded up), and 1 when it is 0, so that polling clients do not ask
	// again and again while the decisions trail a burst.
	DecisionDelay func() time.Duration
}

// DefaultConfig is the configuration of the standalone API.
func DefaultConfig() Config {
	return Config{BodyLimit: 64 << 10, Wait: 2 * time.Second, MaxWait: 30 * time.Second}
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.BodyLimit == 0 {
		c.BodyLimit = d.BodyLimit
	}
	if c.MaxWait == 0 {
		c.MaxWait = max(d.MaxWait, c.Wait)
	}

}

// Validate reports every problem with c; zero fields count as their defaults.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.BodyLimit < 1024 {
		errs = append(errs, fmt.Errorf("--body-limit must be at least 1024 bytes, got %d", c.BodyLimit))
	}
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("--wait must not be negative, got %s", c.Wait))
	}
	if c.MaxWait < c.Wait {
		errs = append(errs, fmt.Errorf("--max-wait (%s) must be at least --wait (%s)", c.MaxWait, c.Wait))
	}
	for token, tenant := range c.Tokens {
		if token == "" || tenant == "" {
			errs = append(errs, errors.New("tokens and tenants must not be empty"))
			break
		}
	}
	return errors.Join(errs...)
}

// Service is what the HTTP layer needs from the application (app.Service).
type Service interface {
	Submit(ctx context.Context, in app.SubmitOrder) (app.Outcome, error)
	Order(ctx context.Context, tenant, orderID string, wait time.Duration) (idempotency.Order, error)
	OrderEvents(ctx context.Context, tenant, orderID string) ([]byte, error)
}

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the OpenAPI 3.1 document of the HTTP API, as served at
// /openapi.json.
func OpenAPI() []byte { return openAPI }

type handlers struct {
	cfg     Config
	svc     Service
	logger  *slog.Logger
	tokens  *Tokens
	metrics *httpMetrics
}

// Handler is the API's HTTP handler with its tokens, which may be replaced
// while it serves.
type Handler struct {
	http.Handler
	Tokens *Tokens
}

// New returns the HTTP handler, with the API's tokens to replace. ops serves
// /healthz, /readyz and /metrics (internal/ops); reg receives the HTTP
// metrics.
func New(cfg Config, svc Service, ops http.Handler, reg prometheus.Registerer, logger *slog.Logger) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if svc == nil || ops == nil || reg == nil || logger == nil {
		return nil, errors.New("api: nil dependency")
	}
	h := &handlers{cfg: cfg, svc: svc, logger: logger.With("component", "api"), tokens: newTokens(cfg.Tokens)}
	m, err := newHTTPMetrics(reg)
	if err != nil {
		return nil, err
	}
	h.metrics = m

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	// A path with a trailing slash (or an unclean one) is not a resource:
	// answer 404 problem+json instead of a redirect with an HTML body.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.Use(h.observe, h.trace, h.recover)

	v1 := r.Group("/v1", h.authenticate)
	none, wait := onlyQuery(), onlyQuery("wait")
	v1.POST("/orders", none, h.createOrder)
	v1.GET("/orders/:id", wait, h.getOrder)
	v1.HEAD("/orders/:id", wait, h.getOrder)
	v1.GET("/orders/:id/events", none, h.getOrderEvents)
	v1.HEAD("/orders/:id/events", none, h.getOrderEvents)

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		r.GET(path, gin.WrapH(ops))
		r.HEAD(path, gin.WrapH(ops))
	}
	serveOpenAPI := func(c *gin.Context) { c.Data(http.StatusOK, "application/json", openAPI) }
	r.GET("/openapi.json", serveOpenAPI)
	r.HEAD("/openapi.json", serveOpenAPI)
	r.NoRoute(func(c *gin.Context) {
		writeProblem(c, problem.New(http.StatusNotFound, problem.CodeNotFound, "Not found", "no resource at "+problem.Quoted(c.Request.URL.Path)))
	})
	r.NoMethod(func(c *gin.Context) {
		writeProblem(c, problem.New(http.StatusMethodNotAllowed, problem.CodeMethod, "Method not allowed",
			problem.Quoted(c.Request.Method)+" is not allowed on "+problem.Quoted(c.Request.URL.Path)))
	})
	return &Handler{Handler: r, Tokens: h.tokens}, nil
}

func (h *handlers) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.logger.ErrorContext(c.Request.Context(), "panic in handler", "path", c.Request.URL.Path, "panic", v)
			writeProblem(c, problem.New(http.StatusInternalServerError, problem.CodeInternal, "Internal error", "an unexpected error occurred"))
			c.Abort()
		}
	}()
	c.Next()
}

// authenticate resolves the tenant from the bearer token.
func (h *handlers) authenticate(c *gin.Context) {
	if !h.tokens.enabled {
		return // every request is DefaultTenant's (see tenant)
	}
	token, ok := ops.BearerToken(c.GetHeader("Authorization"))
	// A refused request's body is never read: the connection is closed
	// after the 401 instead of draining what the client still sends.
	c.Header("Connection", "close")
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="orderly"`)
		writeProblem(c, problem.New(http.StatusUnauthorized, problem.CodeUnauthorized, "Unauthorized", "send Authorization: Bearer <token>"))
		c.Abort()
		return
	}
	tenant, ok := h.tokens.tenant(token)
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="orderly", error="invalid_token"`)
		writeProblem(c, problem.New(http.StatusUnauthorized, problem.CodeUnauthorized, "Unauthorized", "the bearer token is not valid"))
		c.Abort()
		return
	}
	c.Writer.Header().Del("Connection")
	c.Set(tenantKey, tenant)
}

const tenantKey = "orderly.tenant"

// tenant is the request's tenant: DefaultTenant without tokens, else the one
// authenticate found for the request's token (setting it for every request
// would allocate gin's key map for each).
func (h *handlers) tenant(c *gin.Context) string {
	if !h.tokens.enabled {
		return DefaultTenant
	}
	return c.GetString(tenantKey)
}
