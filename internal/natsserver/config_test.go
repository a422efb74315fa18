package natsserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/natsserver"
)

// TestListenAddressNamesTheFlag: a client address whose port is no port is
// refused naming the flag that set it (serve --nats-listen), as the other
// listen addresses are; an empty one (in-process only) and port -1 (any
// free port, nats-server's own) are taken.
func TestListenAddressNamesTheFlag(t *testing.T) {
	t.Parallel()
	base := natsserver.Config{StoreDir: t.TempDir(), ServerName: "n", Fsync: natsserver.Fsync{Interval: time.Second}}
	for listen, want := range map[string]string{"127.0.0.1:abc": "--nats-listen", "127.0.0.1:99999": "--nats-listen", "127.0.0.1": "--nats-listen",
		"": "", "127.0.0.1:-1": "", "127.0.0.1:4222": ""} {
		c := base
		c.Listen = listen
		err := c.Validate()
		if want == "" && err != nil {
			t.Errorf("listen %q: %v", listen, err)
		}
		if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("listen %q: %v, want it refused naming %s", listen, err, want)
		}
	}
}
