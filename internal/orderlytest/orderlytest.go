// Package orderlytest starts real orderly processes (with a real embedded NATS
// server) for tests, and holds the HTTP and stream helpers the tests share.
package orderlytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/server"
)

// The tests' instances run their embedded NATS server in a child process of
// the test binary, as orderly serve does: the binary must serve it.
func init() { natsserver.RunChildIfAsked() }

// Logger is the logger of test processes: silent unless ORDERLY_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("ORDERLY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Config is a server configuration for tests: a fresh data dir, free ports, an
// embedded NATS reachable over TCP (so tests can inspect the streams).
func Config(t testing.TB) server.Config {
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.NATSListen = "127.0.0.1:-1"
	cfg.Processor.Concurrency = 8
	cfg.Projector.Concurrency = 4
	cfg.ShutdownTimeout = 20 * time.Second
	cfg.OrderIDs = FormOfOrderIDs()
	if p := os.Getenv("ORDERLY_TEST_NATS_PROCESS"); p != "" {
		cfg.NATSProcess = p
	}
	return cfg
}

// FormOfOrderIDs is the form of order IDs of the tests' instances: the
// default's (server.OrderIDsAuto: keyed on the fresh topology each test
// makes), or ORDERLY_TEST_ORDER_IDS (nonce or keyed; .ci/run runs the
// contract tests again with nonce, the form of deployments created before
// keyed IDs). Tests of one form's rules set it themselves.
func FormOfOrderIDs() string {
	if form := os.Getenv("ORDERLY_TEST_ORDER_IDS"); form != "" {
		return form
	}
	return server.OrderIDsAuto
}

// Instance is a running orderly.
type Instance struct {
	*server.Server
	// URL is the API's base URL, such as http://127.0.0.1:40123.
	URL string
	Cfg server.Config
	// Creds are the users of its NATS (its own, or its cluster's), for
	// inspection with the operator's key.
	Creds natsauth.Credentials
}

// Start starts orderly with cfg and stops it when the test ends.
func Start(t testing.TB, cfg server.Config) *Instance {
	t.Helper()
	return StartLogged(t, cfg, Logger())
}

// StartLogged is Start with the process's log going to logger.
func StartLogged(t testing.TB, cfg server.Config, logger *slog.Logger) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := server.Start(ctx, cfg, logger)
	if err != nil {
		t.Fatalf("start orderly: %v", err)
	}
	inst := &Instance{Server: s, URL: "http://" + s.HTTPAddr(), Cfg: cfg}
	if dir := s.CredentialsDir(); dir != "" {
		inst.Creds = natsauth.Credentials{Dir: dir}
		if url := s.NATSURL(); url != "" {
			register(url, inst.Creds)
		}
	} else if c, ok := lookup(cfg.NATSURL); ok {
		inst.Creds = c
	}
	t.Cleanup(func() { inst.Stop(t) })
	return inst
}

// Attach makes cfg a process on this instance's embedded NATS, as the serve
// user (it may run any role).
func (i *Instance) Attach(cfg *server.Config) {
	Attach(cfg, i.NATSURL(), i.Creds, natsauth.Serve)
}

// Stop shuts the instance down gracefully (again is a no-op).
func (i *Instance) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := i.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// JetStream connects to the instance's NATS as the operator, for inspection.
func (i *Instance) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	url := i.NATSURL()
	if url == "" {
		url = i.Cfg.NATSURL
	}
	js, err := jsstore.DialJetStream(url, i.Operator(), "orderly-test")
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(js.Conn().Close)
	return js
}

// Operator are the operator's credentials of the instance's NATS, with its
// CA when it has TLS.
func (i *Instance) Operator() jsstore.Credentials {
	return As(i.Creds, natsauth.Operator)
}

// Response is a read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Violation says how the response breaks the OpenAPI document, when
	// CheckResponses is on.
	Violation error
}

// Problem decodes an RFC 9457 body.
func (r Response) Problem(t testing.TB) map[string]any {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json; body %s", ct, r.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	return p
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	return m
}

// Client is a plain HTTP client with a timeout.
var Client = &http.Client{Timeout: 60 * time.Second}

// Do sends a request; header holds "Name: value" lines.
func Do(t testing.TB, method, url string, body []byte, header ...string) Response {
	t.Helper()
	r, err := TryDo(method, url, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if r.Violation != nil {
		t.Errorf("%v", r.Violation)
	}
	return r
}

// TryDo is Do without the test: for goroutines.
func TryDo(method, url string, body []byte, header ...string) (Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Response{}, err
	}
	for _, h := range header {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := Client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	r := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	if check := responseCheck.Load(); check != nil {
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if err := (*check)(req, resp); err != nil {
			r.Violation = fmt.Errorf("%s %s -> %d: %w", method, url, resp.StatusCode, err)
			violations.add(r.Violation)
		}
	}
	return r, nil
}

// Order is a valid order body with the given customer.
func Order(customer string) []byte {
	return []byte(`{"customer_id":"` + customer + `","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}],"total":4990}`)
}

// PostOrder posts body with the key and the extra header lines.
func (i *Instance) PostOrder(t testing.TB, key string, body []byte, header ...string) Response {
	t.Helper()
	h := append([]string{"Content-Type: application/json"}, header...)
	if key != "" {
		h = append(h, "Idempotency-Key: "+key)
	}
	return Do(t, http.MethodPost, i.URL+"/v1/orders", body, h...)
}

// Metric reads one series from the instance's /metrics, written as
// Prometheus renders it (name{label="value",...}); it fails the test when
// the series is not exposed.
func (i *Instance) Metric(t testing.TB, series string) float64 {
	t.Helper()
	for line := range strings.Lines(string(Do(t, http.MethodGet, i.URL+"/metrics", nil).Body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s %s: %v", series, v, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}

// Stored is how many messages stream holds now (without waiting for the
// processors, as Events does).
func Stored(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Events returns every stored event of ORDER_EVENTS, decoded, once the
// processors have settled (see settle). An ordered consumer streams them:
// one request per event took seconds for thousands under the race detector,
// and a read that ended at its first error would have left out the events
// after it.
func Events(t testing.TB, js jetstream.JetStream) []events.RawEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	settle(ctx, js)
	cons, err := js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.EventSubjects}})
	if err != nil {
		t.Fatal(err)
	}
	defer jsstore.DeleteOrdered(js, events.EventStream, cons)
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var out []events.RawEvent
	for {
		m, err := it.Next(jetstream.NextMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) {
			// Events counted at the start may have expired since.
			if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 {
				return out
			}
			continue
		}
		if err != nil {
			t.Fatalf("reading the events after %d of them: %v", len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		var ev events.RawEvent
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatalf("event %d: %v", md.Sequence.Stream, err)
		}
		out = append(out, ev)
		if md.NumPending == 0 {
			return out
		}
	}
}

// settle waits, at most settleWait, until the processors' consumer has
// nothing pending or unacknowledged. Since ADR 0009 an order's response is
// stored a moment before its event (the command is acked after the event), so
// a test that reads the events right after its answers would miss the last
// ones. A processor that does not run, or stays busy, is not waited for
// longer: the events are read as they are then.
func settle(ctx context.Context, js jetstream.JetStream) {
	deadline := time.Now().Add(settleWait)
	for {
		c, err := js.Consumer(ctx, events.CommandStream, jsstore.ProcessorConsumer)
		if err != nil {
			return
		}
		info, err := c.Info(ctx)
		if err != nil || time.Now().After(deadline) {
			return
		}
		// The pending count alone can lag a command just stored: the ack
		// floor must have reached the stream's last command too.
		s, err := js.Stream(ctx, events.CommandStream)
		if err != nil || info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= s.CachedInfo().State.LastSeq {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const settleWait = 5 * time.Second

// CreatedByKey counts the OrderCreated events per idempotency key hash.
func CreatedByKey(t testing.TB, js jetstream.JetStream) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, ev := range Events(t, js) {
		if ev.Type != events.OrderCreatedType {
			continue
		}
		var d events.OrderCreated
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		n[d.IdempotencyKeyHash]++
	}
	return n
}

// FreePort returns a TCP port that is free now and that no other caller
// got, in this test binary or in another one running at the same time (go
// test runs packages side by side: a port that one package's cluster node
// had not bound yet was once handed to another package's test, whose
// listener then failed). Each port given is reserved by an exclusive lock
// (flock) on a file named after it in the temporary directory's
// orderly-test-ports, held until the binary exits; the kernel drops it
// when the binary dies. It picks below the kernel's ephemeral range (32768
// and up on Linux), so a port a test keeps for a while is not handed to
// another test's listener on port 0 meanwhile.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePortIn(t, portsFrom, portsCount)
}

// FreePort's range (below the ephemeral ports), and where its reservations are.
const portsFrom, portsCount = 20000, 12000

func portsDir() string { return filepath.Join(os.TempDir(), "orderly-test-ports") }

// freePortIn is FreePort from the n ports from lo on.
func freePortIn(t testing.TB, lo, n int) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	dir := portsDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("the ports' reservations: %v", err)
	}
	for range 1000 {
		p := lo + rand.IntN(n)
		if portsGiven[p] != nil {
			continue
		}
		reserved := flock.New(filepath.Join(dir, strconv.Itoa(p)))
		if ok, err := reserved.TryLock(); err != nil || !ok {
			continue // another binary's, or not lockable
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			_ = reserved.Close()
			continue
		}
		l.Close()
		portsGiven[p] = reserved // kept: a collected lock's file closes, and its lock goes
		return p
	}
	t.Fatalf("no free port among %d-%d", lo, lo+n-1)
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]*flock.Flock{}
)

// Eventually polls cond every 20ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer that a process's output and a test may use at
// once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Section returns the "## heading" section of the Markdown file at path, up
// to the next section of that level; it fails the test when there is none.
func Section(t testing.TB, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## "+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", path, heading)
	}
	s = s[start+1:]
	if end := strings.Index(s[3:], "\n## "); end >= 0 {
		s = s[:end+3]
	}
	return s
}

// NamesIn returns every match of name in the files, each with the files that
// name it; it fails the test when a file cannot be read.
func NamesIn(t testing.TB, name *regexp.Regexp, files ...string) map[string][]string {
	t.Helper()
	named := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(b), -1) {
			if !slices.Contains(named[n], f) {
				named[n] = append(named[n], f)
			}
		}
	}
	return named
}
