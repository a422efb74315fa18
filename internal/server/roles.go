package server

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/app"
	"github.com/orderly-dev/orderly/internal/hub"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/ops"
	"github.com/orderly-dev/orderly/internal/pipeline"
	"github.com/orderly-dev/orderly/processor"
	"github.com/orderly-dev/orderly/projections"
)

// publisher returns what a component writes through: js, or a batcher on js
// (stopped at shutdown) when writes are batched; refused below the free-space
// reserve of its level when the guard is on; followed for readiness.
func (s *Server) publisher(js jetstream.JetStream, level jsstore.Level) jsstore.Publisher {
	var p jsstore.Publisher = js
	if s.cfg.BatchWrites {
		b := jsstore.NewBatcher(js, 4, s.cfg.Topology.AckWait)
		s.batchers = append(s.batchers, b)
		p = b
	}
	if s.guard != nil {
		p = s.guard.Publisher(p, level)
	}
	return s.writes.Publisher(p)
}

// The stores are the processor's batch ports (their request and outcome types
// are declared alike on both sides) and give its hints; were they to drift
// apart, the processor would fall back to one write per command, or read
// what it need not, without a word, so the build checks it.
var (
	_ processor.BatchClaims   = (*jsstore.Results)(nil)
	_ processor.BatchEvents   = (*jsstore.Events)(nil)
	_ processor.RecordsHint   = (*jsstore.Results)(nil)
	_ processor.KeyClaimsHint = (*jsstore.Events)(nil)
)

func (s *Server) startProcessor(ctx context.Context, js jetstream.JetStream) error {
	claims, err := jsstore.OpenResults(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	evs, err := jsstore.OpenEvents(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	h, err := processor.New(processor.Config{Hooks: s.cfg.ProcessorHooks, ResultTTL: claims.TTL()}, processor.Deps{Claims: claims, Events: evs}, s.registry, s.logger)
	if err != nil {
		return err
	}
	s.wg.Add(1)
	go s.followDecidedBelow(js, evs)
	delivery := func(d *pipeline.Delivery) processor.Delivery {
		pd := processor.Delivery{Data: d.Data, Seq: d.Seq, Delivered: d.Delivered}
		// Only the operator may publish on the replay subject (natsauth), so
		// only there is the header trusted.
		if d.Subject == events.ReplaySubject {
			if seq, err := strconv.ParseUint(d.Header.Get(events.HeaderReplayOf), 10, 64); err == nil && seq > 0 && seq < d.Seq {
				pd.OrderSeq = seq
			}
		}
		return pd
	}
	pcfg := s.cfg.Processor
	if s.cfg.DecisionLag > 0 {
		// The API starts after the processor: until then nobody waits and
		// nothing comes in.
		pcfg.Yield = &pipeline.Yield{Lag: s.cfg.DecisionLag,
			Waiting: func() int {
				if in := s.intake.Load(); in != nil {
					return in.hub.Waiters()
				}
				return 0
			},
			Intake: func() uint64 {
				if in := s.intake.Load(); in != nil {
					return in.svc.Stored()
				}
				return 0
			},
		}
		s.yield = pcfg.Yield
	}
	return s.run(ctx, js, pcfg, pipeline.Handler{
		// The commands that arrived together (or one), their claims and
		// events each written with one wait (ADR 0011); a span per command.
		HandleBatch: func(ctx context.Context, ds []*pipeline.Delivery) []error {
			pds := make([]processor.Delivery, len(ds))
			spans := make([]trace.Span, len(ds))
			for i, d := range ds {
				pds[i] = delivery(d)
				pds[i].Ctx, spans[i] = s.tracer.Start(d.Trace(ctx), "process CreateOrder", trace.WithSpanKind(trace.SpanKindConsumer),
					trace.WithAttributes(attribute.Int64("messaging.message.delivery_count", int64(d.Delivered))))
			}
			errs := h.HandleBatch(ctx, pds)
			for i, span := range spans {
				_ = spanErr(span, errs[i])
				span.End()
			}
			return errs
		},
		GiveUp: func(ctx context.Context, d *pipeline.Delivery, cause error) error {
			ctx, span := s.tracer.Start(ctx, "give up CreateOrder", trace.WithSpanKind(trace.SpanKindConsumer))
			defer span.End()
			span.RecordError(cause)
			return spanErr(span, h.GiveUp(ctx, delivery(d), cause))
		},
	})
}

func (s *Server) startProjector(ctx context.Context, js jetstream.JetStream) error {
	results, err := jsstore.OpenResults(ctx, js, s.publisher(js, jsstore.Decisions))
	if err != nil {
		return err
	}
	p, err := projections.NewProjector(projections.ProjectorConfig{ResultTTL: results.TTL()}, results, s.registry, s.logger)
	if err != nil {
		return err
	}
	return s.run(ctx, js, s.cfg.Projector, pipeline.Handler{
		Handle: func(ctx context.Context, d *pipeline.Delivery) error {
			ctx, span := s.tracer.Start(ctx, "project "+d.Subject, trace.WithSpanKind(trace.SpanKindConsumer))
			defer span.End()
			return spanErr(span, p.Handle(ctx, d.Data))
		},
	})
}

func (s *Server) startAPI(ctx context.Context, js jetstream.JetStream, ready, live []ops.Check) error {
	results, err := jsstore.OpenResults(ctx, js, js)
	if err != nil {
		return err
	}
	evs, err := jsstore.OpenEvents(ctx, js, js)
	if err != nil {
		return err
	}
	commands, err := jsstore.OpenCommands(ctx, js, s.publisher(js, jsstore.NewOrders))
	if err != nil {
		return err
	}
	hcfg := s.cfg.Hub
	hcfg.ResultTTL = results.TTL()
	hcfg.Keys = evs
	h, err := hub.New(hcfg, results, evs, s.registry, s.logger)
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	s.hub = h
	acfg := s.cfg.App
	acfg.Up = jsstore.WatchHealth(s.nc).Up
	acfg.KeyedOrderIDs = s.cfg.OrderIDs == jsstore.OrderIDsKeyed
	if s.cfg.OrderIDs == OrderIDsAuto {
		form, err := jsstore.StoredOrderIDs(ctx, js)
		if err != nil {
			return err
		}
		acfg.KeyedOrderIDs = form == jsstore.OrderIDsKeyed
	}
	var cache app.Cache = h
	if s.cfg.KeysAlwaysNew {
		cache = keysAlwaysNew{h}
	}
	deps := app.Deps{
		Results: keyAnswers{bucket: results, events: evs, ttl: results.TTL(), now: time.Now}, Cache: cache, Watcher: h, Commands: commands, Orders: projections.NewOrders(evs),
	}
	if s.durable != nil {
		deps.Durable = s.durable
	}
	svc, err := app.NewService(acfg, deps, s.logger)
	if err != nil {
		return err
	}
	s.svc = svc
	s.intake.Store(&intake{hub: h, svc: svc})
	s.logger.Info("order IDs", "form", map[bool]string{true: jsstore.OrderIDsKeyed, false: jsstore.OrderIDsNonce}[svc.KeyedOrderIDs()], "setting", s.cfg.OrderIDs)
	if s.cfg.OrderIDs == OrderIDsAuto {
		s.wg.Add(1)
		go s.followOrderIDs(js)
	}
	ready = append(ready, ops.Check{Name: "results_feed", Run: func(context.Context) error { return h.Live() }})
	s.registry.MustRegister(ops.CheckCollector(ready, live, 2*time.Second))
	opsHandler, err := ops.NewHandler(s.cfg.Ops, ready, live, s.registry)
	if err != nil {
		return err
	}
	s.ops = opsHandler
	apiCfg := s.cfg.API
	apiCfg.Tracer = s.tracer
	if y := s.yield; y != nil {
		// While the processor pauses, what is stored now may wait up to the
		// lag for its decision: pending answers say so (Retry-After).
		apiCfg.DecisionDelay = func() time.Duration {
			if y.Paused() {
				return y.Lag
			}
			return 0
		}
	}
	handler, err := api.New(apiCfg, svc, opsHandler, s.registry, s.logger)
	if err != nil {
		return err
	}
	s.tokens = handler.Tokens
	s.tokenReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orderly_tokens_reloads_total",
		Help: "Reloads of the API's tokens (SIGHUP re-reads --tokens-file), by result: reloaded, or refused (the file unreadable or without a valid set; the API kept its tokens).",
	}, []string{"result"})
	for _, r := range []string{"reloaded", "refused"} {
		s.tokenReloads.WithLabelValues(r)
	}
	s.registry.MustRegister(s.tokenReloads)
	return s.serveHTTP(handler)
}

// followOrderIDs looks at the form of order IDs stored with the topology
// every OrderIDsRefresh, and switches the API to it, until shutdown.
func (s *Server) followOrderIDs(js jetstream.JetStream) {
	s.every(cmp.Or(s.cfg.OrderIDsRefresh, 5*time.Second), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		form, err := jsstore.StoredOrderIDs(ctx, js)
		cancel()
		if err != nil {
			return true // NATS away: the form stays as it was
		}
		if keyed := form == jsstore.OrderIDsKeyed; keyed != s.svc.KeyedOrderIDs() {
			s.svc.SetKeyedOrderIDs(keyed)
			s.logger.Info("order IDs: the form stored with the topology changed; new orders take it", "form", form)
		}
		return true
	})
}

// followDecidedBelow reads the processors' consumer's acknowledgement floor
// now and every DecidedBelowRefresh, until shutdown, for the events to carry
// (events.HeaderDecidedBelow): when the consumer is removed, orderly setup
// makes it again from the newest event's floor rather than from the
// first retained command. A reading that fails leaves the last one: what
// was handled stays handled.
func (s *Server) followDecidedBelow(js jetstream.JetStream, evs *jsstore.Events) {
	read := func() bool {
		// A short bound: a reading in progress holds the shutdown up.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err := js.Consumer(ctx, s.cfg.Processor.Stream, s.cfg.Processor.Consumer); err == nil {
			evs.SetDecidedBelow(c.CachedInfo().AckFloor.Stream + 1)
		}
		return true
	}
	read()
	s.every(cmp.Or(s.cfg.DecidedBelowRefresh, time.Second), read)
}

// every runs f every interval until f returns false or the server stops,
// and then marks the goroutine done (s.wg).
func (s *Server) every(interval time.Duration, f func() bool) {
	defer s.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	done := s.fault.stopped()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

// keysAlwaysNew is a hub whose view of the keys lags behind every record.
type keysAlwaysNew struct{ *hub.Hub }

func (keysAlwaysNew) KnownNew(string) bool { return true }

// run builds a pipeline, starts it and waits until it consumes.
func (s *Server) run(ctx context.Context, js jetstream.JetStream, cfg pipeline.Config, h pipeline.Handler) error {
	cfg.Timeout = s.cfg.pipelineTimeout(cfg)
	p, err := pipeline.New(cfg, js, s.publisher(js, jsstore.Decisions), h, s.registry, s.logger)
	if err != nil {
		return err
	}
	s.pipelines = append(s.pipelines, p)
	errc := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := p.Run(context.WithoutCancel(ctx)); err != nil {
			err = fmt.Errorf("%s: %w", cfg.Name, err)
			errc <- err
			s.failed <- err
		}
	}()
	select {
	case <-p.Running():
		return nil
	case err := <-errc:
		return err
	case <-time.After(s.cfg.StartupTimeout):
		return fmt.Errorf("%s did not start within %s", cfg.Name, s.cfg.StartupTimeout)
	}
}

// spanErr marks span failed with err, and returns err.
func spanErr(span trace.Span, err error) error {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}
