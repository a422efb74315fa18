package orderlytest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RunNATS starts a nats-server with opts in the test's process, waits until
// it takes connections, and stops it at the test's end. StoreDir is a
// directory of the test's unless opts names one; NoSigs is set.
func RunNATS(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = tb.TempDir()
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatalf("nats-server %s not ready", opts.ServerName)
	}
	return ns
}
