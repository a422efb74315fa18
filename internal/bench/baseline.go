package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/ops"
)

// BaselineHandler is the ceiling orderly is measured against: a bare gin
// handler that does the HTTP work orderly does — parse the key, check the media
// type, read the body under the limit, decode and validate the order, compute
// the key hash and the fingerprint — and answers 201 with the rendered order,
// without NATS.
func BaselineHandler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	var seq atomic.Uint64 // stands in for the command's stream sequence
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o, err := ops.NewHandler(ops.Config{}, nil, nil, reg)
	if err != nil { // a constant configuration: cannot happen
		panic(err)
	}
	r.GET("/metrics", gin.WrapH(o))
	r.GET("/healthz", gin.WrapH(o))
	r.POST("/v1/orders", func(c *gin.Context) {
		key, kerr := api.ParseIdempotencyKey(c.Request.Header.Values("Idempotency-Key"))
		if kerr != nil {
			c.Data(http.StatusBadRequest, "application/problem+json", []byte(`{"code":"`+kerr.Code+`"}`))
			return
		}
		if mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type")); err != nil || mt != "application/json" {
			c.Data(http.StatusUnsupportedMediaType, "application/problem+json", []byte(`{"code":"unsupported_media_type"}`))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10))
		if err != nil {
			c.Data(http.StatusRequestEntityTooLarge, "application/problem+json", []byte(`{"code":"request_too_large"}`))
			return
		}
		req, ferrs := api.DecodeOrder(body)
		if ferrs != nil {
			c.Data(http.StatusBadRequest, "application/problem+json", []byte(`{"code":"invalid_request"}`))
			return
		}
		_ = idempotency.KeyHash(api.DefaultTenant, key)
		fp := idempotency.Fingerprint(req)
		sum, _ := req.Sum()
		id := events.OrderID(seq.Add(1), events.NewNonce())
		now := time.Now().UTC()
		order := idempotency.CreatedOrder(events.OrderCreated{
			OrderID: id, CustomerID: req.CustomerID, Currency: req.Currency, Items: req.Items, Total: sum,
			RequestFingerprint: fp, AcceptedAt: now, CreatedAt: now,
		})
		c.Header("Location", idempotency.OrderPath(id))
		c.Data(http.StatusCreated, "application/json", order.Body)
	})
	return r
}

// PublishConfig configures the raw JetStream publish baseline.
type PublishConfig struct {
	// NATSURL is the server to measure (orderly's), with Credentials (the
	// operator's: the baseline creates a scratch stream).
	NATSURL     string
	Credentials jsstore.Credentials
	// Connections is the number of concurrent synchronous publishers.
	Connections int
	// Duration of the measurement.
	Duration time.Duration
	// PayloadSize is the size of each message, about that of a CreateOrder.
	PayloadSize int
	// Replicas of the scratch stream.
	Replicas int
}

// rawStream is the scratch stream of the publish baseline; it is deleted after.
const rawStream = "ORDERLY_BENCH_RAW"

// PublishRate measures synchronous JetStream publishes of messages the size of
// a command, each with a unique Nats-Msg-Id, into a scratch file stream
// configured like ORDER_COMMANDS, on the same server. This is the most a
// process that stores one message per request and waits for its ack can do.
func PublishRate(ctx context.Context, cfg PublishConfig) (Result, error) {
	if cfg.Connections < 1 || cfg.Duration <= 0 {
		return Result{}, errors.New("publish baseline: connections and duration must be positive")
	}
	js, err := jsstore.DialJetStream(cfg.NATSURL, cfg.Credentials, "orderly-bench")
	if err != nil {
		return Result{}, fmt.Errorf("publish baseline: %w", err)
	}
	defer js.Conn().Close()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: rawStream, Subjects: []string{"orderly.bench.raw.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, MaxAge: 10 * time.Minute, Replicas: max(cfg.Replicas, 1),
	})
	if err != nil {
		return Result{}, fmt.Errorf("publish baseline: scratch stream: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, rawStream)
	}()

	payload, _ := json.Marshal(events.CreateOrder{Type: events.CreateOrderType, Request: mustDecode(Body(cfg.PayloadSize))})
	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var seq atomic.Int64
	var wg sync.WaitGroup
	workers := make([]*worker, cfg.Connections)
	machine := measureMachineCPU()
	start := time.Now()
	for i := range workers {
		w := &worker{status: map[int]int{}}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				n := strconv.FormatInt(seq.Add(1), 36)
				t0 := time.Now()
				_, err := js.PublishMsg(lctx, &nats.Msg{Subject: "orderly.bench.raw." + n, Data: payload,
					Header: nats.Header{jetstream.MsgIDHeader: []string{prefix + n}}})
				if lctx.Err() != nil {
					return
				}
				w.samples = append(w.samples, time.Since(t0))
				if err != nil {
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					continue
				}
				w.status[http.StatusOK]++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := Result{Name: "jetstream sync publish", Status: map[string]int{}, Seconds: elapsed.Seconds(), MachineCPU: machine()}
	for _, w := range workers {
		res.samples = append(res.samples, w.samples...)
		res.Errors += w.errors
		if w.firstErr != nil && res.FirstErr == "" {
			res.FirstErr = w.firstErr.Error()
		}
		res.Status["acked"] += w.status[http.StatusOK]
	}
	res.Requests = len(res.samples)
	res.PerSecond = float64(res.Requests) / elapsed.Seconds()
	res.Latency = PercentilesOf(res.samples)
	return res, nil
}

func mustDecode(body []byte) events.OrderRequest {
	req, errs := api.DecodeOrder(body)
	if errs != nil {
		panic(fmt.Sprintf("bench body does not decode: %v", errs))
	}
	return req
}

// WaitIdle waits until orderly's processor consumer, and the optional
// projector's when it exists, have nothing pending (the work a run left
// behind is done), or timeout passes.
func WaitIdle(ctx context.Context, natsURL string, creds jsstore.Credentials, timeout time.Duration, progress io.Writer) error {
	js, err := jsstore.DialJetStream(natsURL, creds, "orderly-bench")
	if err != nil {
		return fmt.Errorf("waiting for the backlog: %w", err)
	}
	defer js.Conn().Close()
	deadline := time.Now().Add(timeout)
	for {
		pending := uint64(0)
		for _, c := range [][2]string{{events.CommandStream, jsstore.ProcessorConsumer}, {events.EventStream, jsstore.ProjectorConsumer}} {
			cons, err := js.Consumer(ctx, c[0], c[1])
			if c[1] == jsstore.ProjectorConsumer && errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("waiting for the backlog: %w", err)
			}
			info, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			pending += info.NumPending + uint64(info.NumAckPending)
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the backlog (%d messages) did not drain in %s", pending, timeout)
		}
		if progress != nil {
			fmt.Fprintf(progress, "\r  waiting for the processing backlog: %d messages   ", pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
