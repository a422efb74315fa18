package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/server"
)

// SetupCmd is orderly setup.
type SetupCmd struct {
	NATSURL        string        `name:"nats-url" env:"ORDERLY_NATS_URL" required:"" help:"NATS server URL(s), comma-separated."`
	StartupTimeout time.Duration `name:"startup-timeout" env:"ORDERLY_STARTUP_TIMEOUT" default:"2m" help:"How long to wait for NATS and JetStream (a cluster that is still forming)."`
	CredFlags
	TopologyFlags
	Projector bool   `name:"projector" env:"ORDERLY_SETUP_PROJECTOR" help:"Create the projector's durable consumer too, for 'orderly projector' processes (optional: the processor stores each key's response itself)."`
	OrderIDs  string `name:"order-ids" env:"ORDERLY_SETUP_ORDER_IDS" enum:",nonce,keyed" default:"" help:"Store the form of the IDs of new orders that APIs with --order-ids auto take, within seconds: keyed or nonce (docs/adr/0010). Switch to keyed only once every processor and API runs a version that knows keyed IDs (docs/operations.md). Empty: leave it (a topology this version creates stores keyed)."`
}

// Run sets the topology up.
func (c *SetupCmd) Run(g *globals) error {
	topo := c.topology()
	topo.Projector = c.Projector
	topo.OrderIDs = c.OrderIDs
	err := server.Setup(g.ctx, server.SetupConfig{
		Connect:  jsstore.ConnectConfig{URL: c.NATSURL, Name: "setup", Credentials: c.credentials()},
		Topology: topo, StartupTimeout: c.StartupTimeout,
	}, g.logger)
	if errors.Is(err, jsstore.ErrReplicas) {
		return fmt.Errorf("%w\n(the existing streams are left as they are)", err)
	}
	if err != nil {
		return err
	}
	consumers := "consumer processor"
	if c.Projector {
		consumers = "consumers processor and projector"
	}
	fmt.Println("topology ready: streams ORDER_COMMANDS, ORDER_EVENTS, ORDER_COMMANDS_DLQ, bucket ORDER_RESULTS, " + consumers)
	return nil
}

// CredentialsCmd groups the credential tools.
type CredentialsCmd struct {
	Init CredentialsInitCmd `cmd:"" help:"Create the NATS users' nkey seeds (mode 0600) that are missing in a directory, and the nats-server configuration fragment (accounts, users, permissions) to include from every node's config. Existing seeds are kept."`
}

// CredentialsInitCmd is orderly credentials init.
type CredentialsInitCmd struct {
	Dir string `name:"dir" arg:"" type:"path" help:"Directory for the seeds and nats-accounts.conf."`
}

// Run creates the credentials.
func (c *CredentialsInitCmd) Run() error {
	creds := natsauth.Credentials{Dir: c.Dir}
	if err := creds.Init(); err != nil {
		return err
	}
	if err := creds.Check(); err != nil {
		return err
	}
	fmt.Printf("NATS credentials in %s:\n", c.Dir)
	for _, u := range natsauth.Users {
		pub, err := creds.PublicKey(u)
		if err != nil {
			return err
		}
		fmt.Printf("  %-10s %s  %s\n", u, creds.SeedPath(u), pub)
	}
	fmt.Printf("include %s from every nats-server's configuration\n", creds.ConfigPath())
	return nil
}
