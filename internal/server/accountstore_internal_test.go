package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/orderly-dev/orderly/internal/jsstore"
)

// TestAccountStoreFull: readiness fails from accountStoreHeadroom below the
// account's storage limit, and never for an account without one.
func TestAccountStoreFull(t *testing.T) {
	t.Parallel()
	const limit = 100 << 20
	for _, tc := range []struct {
		used  uint64
		limit int64
		full  bool
	}{
		{used: 0, limit: -1},
		{used: 1 << 40, limit: -1}, // no limit, however much is used
		{used: 1 << 40, limit: 0},
		{used: 10 << 20, limit: limit},
		{used: limit - accountStoreHeadroom - 1, limit: limit},
		{used: limit - accountStoreHeadroom, limit: limit, full: true},
		{used: limit + 5<<20, limit: limit, full: true}, // a cluster goes a little past it
	} {
		info := &jetstream.AccountInfo{Tier: jetstream.Tier{Store: tc.used, Limits: jetstream.AccountLimits{MaxStore: tc.limit}}}
		err := accountStoreFull(info)
		if (err != nil) != tc.full {
			t.Errorf("%d bytes used of %d: %v, want full %v", tc.used, tc.limit, err, tc.full)
		}
		if err != nil && !strings.Contains(err.Error(), "at its limit") {
			t.Errorf("%d bytes used of %d: %v does not say the limit is reached", tc.used, tc.limit, err)
		}
	}
}

// TestAccountStoreFullOnATieredAccount: a real nats-server in operator mode,
// with orderly's account a JWT whose JetStream limits are tiered (as hosted
// NATS makes them: one limit per replica count, none for the account), fills
// the R1 tier; readiness says so, naming the tier. Before the tiers were
// read, such an account had no limit that orderly saw: it stayed ready
// while every write was refused.
func TestAccountStoreFullOnATieredAccount(t *testing.T) {
	t.Parallel()
	const limit = 2 << 20
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	key := func(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
		kp, err := create()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		return kp, pub
	}
	okp, opub := key(nkeys.CreateOperator)
	oc := jwt.NewOperatorClaims(opub)
	_, spub := key(nkeys.CreateAccount)
	akp, apub := key(nkeys.CreateAccount)
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamTieredLimits = jwt.JetStreamTieredLimits{
		"R1": {DiskStorage: limit, MemoryStorage: -1, Streams: -1, Consumer: -1},
	}
	resolver := &natsserver.MemAccResolver{}
	for pub, claims := range map[string]*jwt.AccountClaims{spub: jwt.NewAccountClaims(spub), apub: ac} {
		token, err := claims.Encode(okp)
		must(err)
		must(resolver.Store(pub, token))
	}
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: spub, NoSigs: true})
	must(err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	ukp, upub := key(nkeys.CreateUser)
	user, err := jwt.NewUserClaims(upub).Encode(akp)
	must(err)
	seed, err := ukp.Seed()
	must(err)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserJWTAndSeed(user, string(seed)))
	must(err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Replicas: 1})
	must(err)

	info, err := js.AccountInfo(ctx)
	must(err)
	if f := jsstore.AccountStorage(info); f.Tier != "R1" || f.Limit != limit || accountStoreFull(info) != nil {
		t.Fatalf("an empty tiered account: %+v (tiers %+v), full: %v", f, info.Tiers, accountStoreFull(info))
	}
	body := make([]byte, 16<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, fmt.Sprintf("t.%d", i), body); err != nil {
			// The tier's limit refuses the write as the account's does: a
			// fault of the store (jsstore classifies it so).
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10002 || !jsstore.IsUnavailable(err) {
				t.Fatalf("write %d refused with %v, want 10002 (resource limits exceeded for account), a fault of the store", i, err)
			}
			break
		}
		if i > 2*limit/len(body) {
			t.Fatalf("%d writes of %d bytes taken by a tier of %d", i, len(body), limit)
		}
	}
	info, err = js.AccountInfo(ctx)
	must(err)
	err = accountStoreFull(info)
	if err == nil || !strings.Contains(err.Error(), "tier R1") || !strings.Contains(err.Error(), "at its limit") {
		t.Fatalf("the tier filled: %v (tiers %+v)", err, info.Tiers)
	}
	t.Log(err)
}
