package jsstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkFeed measures what a feed of a stream's new messages costs the
// process (server and clients, over loopback TCP, fsync every second) per
// stored message: 64 publishers store 400-byte messages on per-key subjects,
// as processors store events, with no feed, with the feed orderly runs (an
// ordered consumer with a heartbeat every second, jsstore.follow), and with
// a core subscription to the stream's RePublish of every message, the
// lighter feed nats-server offers. Run:
//
//	go test -run '^$' -bench Feed -benchtime 100000x -count 3 ./internal/jsstore/
//
// cpu-µs/msg is the process's user and system time per message.
func BenchmarkFeed(b *testing.B) {
	for _, feed := range []string{"none", "ordered", "republish"} {
		b.Run(feed, func(b *testing.B) { benchFeed(b, feed) })
	}
}

func benchFeed(b *testing.B, feed string) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.TempDir(),
		SyncInterval: time.Second, NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	ns.Start()
	b.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("the server did not start")
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	pub, sub := connect(), connect()
	js, err := jetstream.New(pub)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}, Storage: jetstream.FileStorage}
	if feed == "republish" {
		cfg.RePublish = &jetstream.RePublish{Source: "ev.>", Destination: "rp.ev.>"}
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	switch feed {
	case "ordered":
		sjs, err := jetstream.New(sub)
		if err != nil {
			b.Fatal(err)
		}
		cons, err := sjs.OrderedConsumer(ctx, "EV", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"ev.>"}, DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Subject(); got.Add(1) },
			jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cc.Stop)
	case "republish":
		s, err := sub.Subscribe("rp.ev.>", func(m *nats.Msg) { _ = m.Header.Get("Nats-Sequence"); got.Add(1) })
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SetPendingLimits(-1, -1); err != nil {
			b.Fatal(err)
		}
		if err := sub.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	body := make([]byte, 400)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	var n atomic.Int64
	before := processCPU()
	b.ResetTimer()
	b.SetParallelism(32) // 64 publishers on two cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := js.Publish(ctx, "ev.k"+strconv.FormatInt(n.Add(1), 36)+".created", body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if feed != "none" {
		for deadline := time.Now().Add(30 * time.Second); got.Load() < int64(b.N); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the feed delivered %d of %d", got.Load(), b.N)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-before).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
