package server_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/idempotency"
	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
)

// smallDisk mounts a tmpfs of size bytes and returns its path and a function
// that resizes it. It needs CAP_SYS_ADMIN (root in CI and here).
func smallDisk(t *testing.T, size int64) (string, func(size int64)) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs for the full-disk test (needs CAP_SYS_ADMIN): %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, func(size int64) {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size="+strconv.FormatInt(size, 10)); err != nil {
			t.Fatal(err)
		}
	}
}

// asyncLoad posts new orders with respond-async from 16 clients until stop,
// and records the Location of every 202 and how many were refused with 503.
type asyncLoad struct {
	mu       sync.Mutex
	accepted map[string]string // key -> Location of the 202
	refused  atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startLoad(t *testing.T, url, prefix string) *asyncLoad {
	l := &asyncLoad{accepted: map[string]string{}, stop: make(chan struct{})}
	for w := 0; w < 16; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				r, err := orderlytest.TryDo(http.MethodPost, url+"/v1/orders", orderlytest.Order("c-"+key),
					"Content-Type: application/json", "Idempotency-Key: "+key, "Prefer: respond-async")
				switch {
				case err != nil:
				case r.Status == http.StatusAccepted:
					l.mu.Lock()
					l.accepted[key] = r.Header.Get("Location")
					l.mu.Unlock()
				case r.Status == http.StatusServiceUnavailable:
					l.refused.Add(1)
					time.Sleep(20 * time.Millisecond)
				default:
					t.Errorf("%s: %d %s", key, r.Status, r.Body)
				}
			}
		}()
	}
	return l
}

func (l *asyncLoad) end() map[string]string {
	close(l.stop)
	l.wg.Wait()
	return l.accepted
}

// decidedOnce retries every accepted key with its original body and checks
// that it answers 201 with the order it was accepted as, and that each key
// has exactly one OrderCreated. The keys (thousands after a load) are
// retried by eight clients at once: one after the other, under the race
// detector, they took a minute.
func decidedOnce(t *testing.T, inst *orderlytest.Instance, accepted map[string]string) {
	t.Helper()
	keys := make(chan string)
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, fmt.Sprintf(format, args...))
	}
	for range 8 {
		wg.Go(func() {
			for key := range keys {
				deadline := time.Now().Add(60 * time.Second)
				for {
					r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-"+key),
						"Content-Type: application/json", "Idempotency-Key: "+key, "Prefer: wait=10")
					if err == nil && r.Violation != nil {
						fail("%v", r.Violation)
					}
					if err == nil && r.Status == http.StatusCreated {
						if got := r.Header.Get("Location"); got != accepted[key] {
							fail("%s was accepted as %s; its key now answers %s: %s", key, accepted[key], got, r.Body)
						}
						break
					}
					if time.Now().After(deadline) {
						fail("%s not decided within 60 s: %d %s %v", key, r.Status, r.Body, err)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for key := range accepted {
		keys <- key
	}
	close(keys)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d failures among the %d accepted keys (the first ten):\n%s", len(failed), len(accepted), strings.Join(failed[:min(len(failed), 10)], "\n"))
	}
	js := inst.JetStream(t)
	counts := orderlytest.CreatedByKey(t, js)
	for key := range accepted {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
			// Whether the stream lost the event or a read missed it: the
			// stream's state, and the count read again.
			time.Sleep(2 * time.Second)
			again := orderlytest.CreatedByKey(t, js)[idempotency.KeyHash(api.DefaultTenant, key)]
			var state string
			if s, err := js.Stream(t.Context(), events.EventStream); err == nil {
				st := s.CachedInfo().State
				state = fmt.Sprintf("first %d, last %d, %d messages, %d deleted", st.FirstSeq, st.LastSeq, st.Msgs, st.NumDeleted)
			}
			t.Fatalf("%s: %d orders (%d read again 2 s later); %d keys counted; ORDER_EVENTS: %s", key, n, again, len(counts), state)
		}
	}
}

// notReadyFor looks at /readyz every 250 ms for d and fails the test when it
// said ready more than one time in ten (while what). About 100 looks in
// 25 s; fewer when /readyz is slow (the race detector, a busy machine), so
// the ones that said ready are counted, not inferred.
func notReadyFor(t *testing.T, url string, d time.Duration, what string) (looks, saidReady int) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		looks++
		if _, ok := readyz(url); ok {
			saidReady++
		}
	}
	if saidReady > looks/10 {
		t.Fatalf("/readyz said ready %d times out of %d while %s", saidReady, looks, what)
	}
	return looks, saidReady
}

func readyz(url string) (orderlytest.Response, bool) {
	r, err := orderlytest.TryDo(http.MethodGet, url+"/readyz", nil)
	return r, err == nil && r.Status == http.StatusOK
}

// TestFullDiskLosesNoAcceptedOrder fills the data directory's file system
// under async load and keeps it full for 25 s (longer than ten redeliveries
// with backoff take), then gives it room again: orderly refuses new orders
// while the disk is full and says it is not ready, is back on its own once
// there is room, and every order it answered 202 is decided once, under the
// order ID it was given.
func TestFullDiskLosesNoAcceptedOrder(t *testing.T) {
	t.Parallel()
	dir, resize := smallDisk(t, 5<<20)
	cfg := orderlytest.Config(t)
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.MinFreeSpace = 1 << 20
	inst := orderlytest.Start(t, cfg)

	load := startLoad(t, inst.URL, "full")
	orderlytest.Eventually(t, 3*time.Minute, "the disk to fill", func() bool { return load.refused.Load() > 100 })
	// A refusal for want of space is answered at once: waiting out the
	// request's budget (10 s) would only hold the client for the same 503.
	begin := time.Now()
	r := inst.PostOrder(t, "full-at-once", orderlytest.Order("c-full"), "Prefer: respond-async")
	if took := time.Since(begin); r.Status != http.StatusServiceUnavailable || !bytes.Contains(r.Body, []byte("service_unavailable")) || took > 2*time.Second {
		t.Fatalf("a new order on a full disk: %d after %s: %s", r.Status, took.Round(time.Millisecond), r.Body)
	}
	looks, saidReady := notReadyFor(t, inst.URL, 25*time.Second, "the disk was full")
	accepted := load.end()
	if r, _ := readyz(inst.URL); !bytes.Contains(r.Body, []byte(`"storage"`)) {
		t.Fatalf("/readyz does not name the storage check: %s", r.Body)
	}
	t.Logf("disk full: %d accepted, %d refused with 503; /readyz said ready %d times out of %d", len(accepted), load.refused.Load(), saidReady, looks)

	// Room again: back without a restart.
	resize(256 << 20)
	roomAt := time.Now()
	orderlytest.Eventually(t, 10*time.Second, "readiness once there is room", func() bool { _, ok := readyz(inst.URL); return ok })
	ready := time.Since(roomAt)
	if r := inst.PostOrder(t, "after-full", orderlytest.Order("c-after"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("a new order once there is room: %d %s", r.Status, r.Body)
	}
	decidedOnce(t, inst, accepted)
	t.Logf("recovery: ready %s after there was room, every accepted order decided %s after", ready.Round(10*time.Millisecond), time.Since(roomAt).Round(10*time.Millisecond))
}

// TestStoreWriteErrorIsReportedAndSurvivesRestart: a write error below the
// store (here: another writer takes the last free byte, with the guard off)
// stops nats-server's writes for good. orderly says it is not ready at once,
// fails liveness after the grace period (Failed delivers the error, and
// orderly serve exits for its supervisor to restart it), and after the
// restart every order it answered 202 is decided once under its order ID.
func TestStoreWriteErrorIsReportedAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir, _ := smallDisk(t, 32<<20)
	cfg := orderlytest.Config(t)
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.MinFreeSpace = 0
	cfg.StoreFaultGrace = 2 * time.Second
	inst := orderlytest.Start(t, cfg)

	load := startLoad(t, inst.URL, "werr")
	time.Sleep(time.Second)
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	filled := time.Now()
	notReady := make(chan time.Duration, 1)
	go func() {
		for time.Since(filled) < 30*time.Second {
			if _, ok := readyz(inst.URL); !ok {
				notReady <- time.Since(filled)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var failure error
	select {
	case failure = <-inst.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("a stopped store was not reported")
	}
	failedAfter := time.Since(filled)
	// Not ready at once; not live only after the grace, counted from the
	// fault (which readiness saw within a poll of it; 500 ms of slack).
	var notReadyAfter time.Duration
	select {
	case notReadyAfter = <-notReady:
	case <-time.After(5 * time.Second):
		t.Fatal("still ready after liveness failed")
	}
	if failedAfter < notReadyAfter+cfg.StoreFaultGrace-500*time.Millisecond {
		t.Fatalf("liveness failed %s after the disk filled, not ready %s after: within the grace of %s", failedAfter, notReadyAfter, cfg.StoreFaultGrace)
	}
	if r, ok := readyz(inst.URL); ok || !bytes.Contains(r.Body, []byte("Critical write error")) {
		t.Fatalf("/readyz with a stopped store: %d %s", r.Status, r.Body)
	}
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+"/healthz", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after the grace: %d %s", r.Status, r.Body)
	}
	accepted := load.end()
	t.Logf("%d accepted before the store stopped; reported: %v", len(accepted), failure)
	if len(accepted) == 0 {
		t.Fatal("no order accepted: the test needs load")
	}

	// The cause goes away; the documented restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	inst.Stop(t)
	restart := time.Now()
	again := orderlytest.Start(t, cfg)
	if _, ok := readyz(again.URL); !ok {
		t.Fatal("not ready after the restart")
	}
	readyAfter := time.Since(restart)
	decidedOnce(t, again, accepted)
	t.Logf("recovery: not ready %s after the disk filled, liveness failed %s after (grace %s); ready %s after the restart, every accepted order decided %s after",
		notReadyAfter.Round(10*time.Millisecond), failedAfter.Round(10*time.Millisecond), cfg.StoreFaultGrace, readyAfter.Round(10*time.Millisecond), time.Since(restart).Round(10*time.Millisecond))
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return // ENOSPC
		}
	}
}

// TestFsyncGroup: with --fsync group every answer waits for a sync round of
// the streams' files (internal/durable; ADR 0012), unless a round that
// started after its result was known has ended: orders are answered,
// replayed and read as with any other setting, and the setting is refused
// where orderly cannot sync the files itself.
func TestFsyncGroup(t *testing.T) {
	t.Parallel()
	cfg := orderlytest.Config(t)
	cfg.Fsync = natsserver.Fsync{Group: true, Interval: natsserver.GroupInterval}
	inst := orderlytest.Start(t, cfg)
	rounds := func() float64 { t.Helper(); return inst.Metric(t, "orderly_group_syncs_total") }
	before := rounds()
	created := inst.PostOrder(t, "group-1", orderlytest.Order("c-1"))
	if created.Status != http.StatusCreated {
		t.Fatalf("%d %s", created.Status, created.Body)
	}
	afterPost := rounds()
	if afterPost <= before {
		t.Fatalf("a 201 answered with %v sync rounds before and %v after", before, afterPost)
	}
	// The result was known before the 201's round started, which made it
	// durable: its replay needs no round of its own.
	if r := inst.PostOrder(t, "group-1", orderlytest.Order("c-1")); r.Status != http.StatusCreated || !bytes.Equal(r.Body, created.Body) || rounds() != afterPost {
		t.Fatalf("replay: %d %s, rounds %v after %v", r.Status, r.Body, rounds(), afterPost)
	}
	afterReplay := rounds()
	if r := orderlytest.Do(t, http.MethodGet, inst.URL+created.Header.Get("Location"), nil); r.Status != http.StatusOK || rounds() <= afterReplay {
		t.Fatalf("read: %d, rounds %v after %v", r.Status, rounds(), afterReplay)
	}
	if r := inst.PostOrder(t, "group-2", orderlytest.Order("c-2"), "Prefer: respond-async"); r.Status != http.StatusAccepted {
		t.Fatalf("async: %d %s", r.Status, r.Body)
	}

	bad := orderlytest.Config(t)
	bad.Fsync = cfg.Fsync
	bad.NATSURL = "nats://127.0.0.1:1"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "fsync group") {
		t.Fatalf("fsync group against --nats-url: %v", err)
	}
}
