package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/events"
	"github.com/orderly-dev/orderly/internal/admin"
	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestPasswordNATS: orderly against a nats-server of your own whose users
// have a name and a password (--nats-user, --nats-password), which had no
// test: setup makes the topology and an order is created and replayed; a
// wrong password stops the process at start, naming the flags to check (it
// said to pass an nkey seed).
func TestPasswordNATS(t *testing.T) {
	t.Parallel()
	ns := orderlytest.RunNATS(t, &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		Users: []*natsserver.User{{Username: "orderly", Password: "s3cret-pass"}}})
	startOnOwnNATS(t, ns.ClientURL(), jsstore.Credentials{User: "orderly", Password: "s3cret-pass"})

	bad := orderlytest.Config(t)
	bad.NATSURL, bad.Credentials = ns.ClientURL(), jsstore.Credentials{User: "orderly", Password: "wr0ng-Pa55"}
	bad.StartupTimeout = 10 * time.Second
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if s, err := server.Start(sctx, bad, orderlytest.Logger()); err == nil {
		s.Shutdown(sctx)
		t.Fatal("started with a wrong password")
	} else if !errors.Is(err, jsstore.ErrCredentials) || !strings.Contains(err.Error(), "--nats-user and --nats-password") || strings.Contains(err.Error(), "wr0ng-Pa55") {
		// It said to pass an nkey seed (--nats-nkey), whatever was given.
		t.Errorf("a wrong password: %v; want a refusal that names the flags given, not the password", err)
	}
}

// TestOperatorModeNATS: orderly against a nats-server in operator mode
// (accounts and users as JWTs, as hosted NATS runs it), connecting with a
// .creds file (--nats-creds): setup makes the topology, an order is created
// and replayed. The account's JetStream limits are tiered (one per replica
// count, none of the account's own): when something else of the account
// fills its R1 tier, orderly is not ready, naming the tier, and answers new
// orders 503; once there is room again it is ready and takes orders. On the
// code before the tiers were read it stayed ready at the tier's limit.
func TestOperatorModeNATS(t *testing.T) {
	t.Parallel()
	const limit = 8 << 20
	url, credsFile := orderlytest.OperatorNATS(t, jwt.JetStreamTieredLimits{
		"R1": {DiskStorage: limit, MemoryStorage: -1, Streams: -1, Consumer: -1},
	})
	inst := startOnOwnNATS(t, url, jsstore.Credentials{CredsFile: credsFile})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if got := inst.Metric(t, "orderly_account_store_limit_bytes"); got != limit {
		t.Fatalf("the tier's limit reported as %v, want %d", got, limit)
	}

	// Another stream of the account fills the tier.
	js, err := jsstore.DialJetStream(url, jsstore.Credentials{CredsFile: credsFile}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer js.Conn().Close()
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	// In large writes, then in small ones up to the last byte: a command
	// (some 600 bytes) would fit in what a large write leaves.
	for _, size := range []int{64 << 10, 64} {
		body := make([]byte, size)
		for i := 0; ; i++ {
			if _, err := js.Publish(ctx, fmt.Sprintf("fill.%d.%d", size, i), body); err != nil {
				var apiErr *jetstream.APIError
				if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10002 {
					t.Fatalf("write %d of %d bytes refused with %v, want 10002 (resource limits exceeded for account)", i, size, err)
				}
				break
			}
			if i > 2*limit/size {
				t.Fatalf("%d writes of %d bytes taken by a tier of %d", i, size, limit)
			}
		}
	}
	orderlytest.Eventually(t, 30*time.Second, "not ready, naming the tier", func() bool {
		r, ok := readyz(inst.URL)
		return !ok && strings.Contains(string(r.Body), "tier R1")
	})
	if r := inst.PostOrder(t, "op-2", orderlytest.Order("c-op"), "Prefer: respond-async"); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("a new order with the tier full: %d %s", r.Status, r.Body)
	}

	if err := js.DeleteStream(ctx, fill.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	orderlytest.Eventually(t, 30*time.Second, "ready once there is room", func() bool { _, ok := readyz(inst.URL); return ok })
	if r := inst.PostOrder(t, "op-3", orderlytest.Order("c-op"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("an order once there is room: %d %s", r.Status, r.Body)
	}
}

// TestJetStreamDomainOfAHub: orderly connected to a leaf node that has a
// JetStream of its own keeps its streams in the hub's JetStream when told
// its domain (--nats-js-domain): setup makes the topology there, an order
// is created and replayed through the leaf, and the leaf's own JetStream
// holds nothing; orderly backup takes the hub's streams. A role given no
// domain there says that its streams are missing in domain "edge" and names
// the flag. Without a domain setting, orderly could only use the
// leaf's JetStream. A domain that is not one subject token, and a domain
// with the embedded server, are refused before anything starts.
func TestJetStreamDomainOfAHub(t *testing.T) {
	t.Parallel()
	users := []*natsserver.User{{Username: "orderly", Password: "s3cret-pass"}}
	leafPort := orderlytest.FreePort(t)
	hub := orderlytest.RunNATS(t, &natsserver.Options{ServerName: "hub", Host: "127.0.0.1", Port: -1, JetStream: true, JetStreamDomain: "hub",
		Users: users, LeafNode: natsserver.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	remote, err := url.Parse(fmt.Sprintf("nats-leaf://orderly:s3cret-pass@127.0.0.1:%d", leafPort))
	if err != nil {
		t.Fatal(err)
	}
	leaf := orderlytest.RunNATS(t, &natsserver.Options{ServerName: "leaf", Host: "127.0.0.1", Port: -1, JetStream: true, JetStreamDomain: "edge",
		Users: users, LeafNode: natsserver.LeafNodeOpts{Remotes: []*natsserver.RemoteLeafOpts{{URLs: []*url.URL{remote}}}}})
	orderlytest.Eventually(t, 10*time.Second, "the leaf connected to the hub", func() bool { return leaf.NumLeafNodes() == 1 })

	startOnOwnNATS(t, leaf.ClientURL(), jsstore.Credentials{User: "orderly", Password: "s3cret-pass", JSDomain: "hub"})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams := func(srv *natsserver.Server) []string {
		js, err := jsstore.DialJetStream(srv.ClientURL(), jsstore.Credentials{User: "orderly", Password: "s3cret-pass"}, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer js.Conn().Close()
		var names []string
		list := js.StreamNames(ctx)
		for n := range list.Name() {
			names = append(names, n)
		}
		if err := list.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}
	if got := streams(hub); !slices.Contains(got, events.CommandStream) || !slices.Contains(got, events.EventStream) {
		t.Errorf("the hub's streams: %v; want orderly's", got)
	}
	if got := streams(leaf); len(got) != 0 {
		t.Errorf("the leaf's own JetStream holds %v; want nothing", got)
	}

	// Without the domain, a role finds the leaf's JetStream empty and says
	// which domain it found and which flag names another.
	lost := orderlytest.Config(t)
	lost.NATSURL, lost.Credentials = leaf.ClientURL(), jsstore.Credentials{User: "orderly", Password: "s3cret-pass"}
	lost.StartupTimeout = 2 * time.Second
	if s, err := server.Start(ctx, lost, orderlytest.Logger()); err == nil {
		s.Shutdown(ctx)
		t.Fatal("started on the leaf's JetStream, which holds none of orderly's streams")
	} else if !errors.Is(err, jsstore.ErrMissing) || !strings.Contains(err.Error(), `domain "edge"`) || !strings.Contains(err.Error(), "--nats-js-domain") {
		t.Errorf("a role on the leaf without the domain: %v; want the streams missing, the leaf's domain and the flag named", err)
	}

	// orderly backup takes the hub's streams through the leaf.
	nc, err := nats.Connect(leaf.ClientURL(), nats.UserInfo("orderly", "s3cret-pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := admin.Backup(ctx, nc, "hub", filepath.Join(t.TempDir(), "backup"), nil)
	if err != nil {
		t.Fatal(err)
	}
	backedUp := map[string]uint64{}
	for _, sm := range m.Streams {
		backedUp[sm.Name] = sm.Messages
	}
	if backedUp[events.CommandStream] == 0 || backedUp[events.EventStream] == 0 {
		t.Errorf("the backup through the leaf: %v; want the hub's order in it", backedUp)
	}

	for _, c := range []struct{ url, domain, want string }{
		{leaf.ClientURL(), "hub.eu", "no '.', '*', '>'"},
		{leaf.ClientURL(), "h ub", "no '.', '*', '>'"},
		{"", "hub", "only with --nats-url"},
	} {
		cfg := orderlytest.Config(t)
		cfg.NATSURL, cfg.Credentials = c.url, jsstore.Credentials{User: "orderly", Password: "s3cret-pass", JSDomain: c.domain}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("domain %q with NATS URL %q: %v; want it refused (%s)", c.domain, c.url, err, c.want)
		}
	}
}

// startOnOwnNATS runs orderly setup with creds on the NATS at url, starts
// orderly there with them, and has it create an order and replay it.
func startOnOwnNATS(t *testing.T, url string, creds jsstore.Credentials) *orderlytest.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := server.Setup(ctx, server.SetupConfig{Connect: jsstore.ConnectConfig{URL: url, Credentials: creds},
		Topology: jsstore.DefaultTopology(), StartupTimeout: time.Minute}, orderlytest.Logger()); err != nil {
		t.Fatal(err)
	}
	cfg := orderlytest.Config(t)
	cfg.NATSURL, cfg.Credentials = url, creds
	inst := orderlytest.Start(t, cfg)
	if r := inst.PostOrder(t, "own-1", orderlytest.Order("c-own"), "Prefer: wait=10"); r.Status != http.StatusCreated {
		t.Fatalf("an order: %d %s", r.Status, r.Body)
	}
	if r := inst.PostOrder(t, "own-1", orderlytest.Order("c-own")); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("its retry: %d %s", r.Status, r.Body)
	}
	return inst
}
