package orderlytest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/natsx"
)

// JetStream starts an in-process embedded server with orderly's topology for a
// test or benchmark, and returns a JetStream context on it. Everything stops
// when the test ends.
func JetStream(tb testing.TB, fsync natsx.Fsync) jetstream.JetStream {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := natsx.StartEmbedded(ctx, natsx.EmbeddedConfig{ServerName: "test", StoreDir: tb.TempDir(), Fsync: fsync})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := natsx.DefaultTopology().Ensure(ctx, js); err != nil {
		tb.Fatal(err)
	}
	return js
}
