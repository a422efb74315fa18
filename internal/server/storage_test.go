package server_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/idempotency"
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

// TestFullDiskLosesNoAcceptedOrder fills the data directory's file system
// under async load, then gives it room again and restarts: every order that
// was answered 202 is decided once, under the order ID it was given, and a
// retry of its key with the original body gets that order.
func TestFullDiskLosesNoAcceptedOrder(t *testing.T) {
	t.Parallel()
	dir, resize := smallDisk(t, 6<<20)
	cfg := orderlytest.Config(t)
	cfg.DataDir = filepath.Join(dir, "data")
	inst := orderlytest.Start(t, cfg)

	var mu sync.Mutex
	accepted := map[string]string{} // key -> Location of the 202
	var refused, sawNotReady atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("full-%d-%d", w, i)
				r, err := orderlytest.TryDo(http.MethodPost, inst.URL+"/v1/orders", orderlytest.Order("c-"+key),
					"Content-Type: application/json", "Idempotency-Key: "+key, "Prefer: respond-async")
				switch {
				case err != nil:
				case r.Status == http.StatusAccepted:
					mu.Lock()
					accepted[key] = r.Header.Get("Location")
					mu.Unlock()
				case r.Status == http.StatusServiceUnavailable:
					refused.Add(1)
					time.Sleep(20 * time.Millisecond)
				default:
					t.Errorf("%s: %d %s", key, r.Status, r.Body)
				}
			}
		}()
	}
	// Fill the disk, then keep the load on while it is full.
	deadline := time.Now().Add(60 * time.Second)
	for refused.Load() < 200 && time.Now().Before(deadline) {
		if r, err := orderlytest.TryDo(http.MethodGet, inst.URL+"/readyz", nil); err == nil && r.Status == http.StatusServiceUnavailable {
			sawNotReady.Add(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	if refused.Load() < 200 {
		t.Fatalf("the disk did not fill: %d accepted, %d refused", len(accepted), refused.Load())
	}
	t.Logf("disk full: %d accepted, %d refused with 503", len(accepted), refused.Load())

	// Room again, and a restart on the same data directory.
	resize(256 << 20)
	inst.Stop(t)
	again := orderlytest.Start(t, cfg)
	for key, loc := range accepted {
		var r orderlytest.Response
		orderlytest.Eventually(t, 60*time.Second, key+" decided", func() bool {
			r = again.PostOrder(t, key, orderlytest.Order("c-"+key), "Prefer: wait=10")
			return r.Status == http.StatusCreated
		})
		if got := r.Header.Get("Location"); got != loc {
			t.Fatalf("%s was accepted as %s; after the full disk its key answers %s: %s", key, loc, got, r.Body)
		}
	}
	counts := orderlytest.CreatedByKey(t, again.JetStream(t))
	for key := range accepted {
		if n := counts[idempotency.KeyHash(api.DefaultTenant, key)]; n != 1 {
			t.Fatalf("%s: %d orders", key, n)
		}
	}
	_ = bytes.Equal
}
