package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/server"
)

// SetupCmd is orderly setup.
type SetupCmd struct {
	NATSURL        string        `name:"nats-url" env:"ORDERLY_NATS_URL" required:"" help:"NATS server URL(s), comma-separated."`
	StartupTimeout time.Duration `name:"startup-timeout" env:"ORDERLY_STARTUP_TIMEOUT" default:"2m" positive:"" help:"How long to wait for NATS and JetStream (a cluster that is still forming)."`
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
	Init    CredentialsInitCmd    `cmd:"" help:"Create the NATS users' nkey seeds, the cluster's route password and its TLS CA and node certificate (keys mode 0600) that are missing in a directory, and the nats-server configuration fragments to include from every node's config: nats-accounts.conf (accounts, users, permissions) and nats-route.conf (the route user, the password's bcrypt hash). Existing secrets are kept; the node certificate is issued again when it lacks a --tls-host or expires within 30 days."`
	Service CredentialsServiceCmd `cmd:"" help:"Give a consumer service a NATS key of its own (add, remove, list): in an account of its own, it reads ORDER_EVENTS and pulls from and acks its own consumer only (docs/events.md)."`
}

// CredentialsServiceCmd groups the consumer services' keys.
type CredentialsServiceCmd struct {
	Add    CredentialsServiceAddCmd    `cmd:"" help:"Create the service's key (services/NAME.nk, mode 0600) and write nats-accounts.conf again with an account for it. It may read ORDER_EVENTS and pull from and ack the durable consumer NAME (make it with orderly events consumer add NAME), nothing else. NATS loads it when it starts: restart orderly serve, or the nodes of a cluster one at a time (a reload is not enough, nats-server issue 8560)."`
	Remove CredentialsServiceRemoveCmd `cmd:"" help:"Delete the service's key and write nats-accounts.conf again without its account (NATS drops it at its next start). Its consumer stays: orderly events consumer remove NAME deletes it."`
	List   CredentialsServiceListCmd   `cmd:"" help:"List the consumer services with keys of their own."`
}

// credentialsDir is the --dir of the service commands.
type credentialsDir struct {
	Dir string `name:"dir" env:"ORDERLY_CREDENTIALS_DIR" default:"./data/credentials" type:"path" help:"Credentials directory: orderly serve's <data-dir>/credentials, or the one of orderly credentials init."`
}

// creds is the directory, which must hold orderly's users already.
func (c credentialsDir) creds() (natsauth.Credentials, error) {
	creds := natsauth.Credentials{Dir: c.Dir}
	if _, err := os.Stat(creds.ConfigPath()); err != nil {
		return creds, fmt.Errorf("%s: no %s there: run orderly serve (its <data-dir>/credentials) or orderly credentials init DIR first", c.Dir, natsauth.ConfigFile)
	}
	return creds, nil
}

// CredentialsServiceAddCmd is orderly credentials service add.
type CredentialsServiceAddCmd struct {
	credentialsDir
	Name string `arg:"" help:"The service's name, the same as its consumer's (1 to 64 letters, digits, '-' or '_')."`
}

// Run creates the key.
func (c *CredentialsServiceAddCmd) Run() error {
	creds, err := c.creds()
	if err != nil {
		return err
	}
	if err := creds.AddService(c.Name); err != nil {
		return err
	}
	fmt.Printf("service %s: key %s (give it to the service only), account %s in %s\n", c.Name, creds.ServiceSeedPath(c.Name), natsauth.ServiceAccount(c.Name), creds.ConfigPath())
	fmt.Printf("NATS loads it when it starts: restart orderly serve, or the nodes of a cluster one at a time (a reload is not enough, nats-server issue 8560). The service binds to its consumer (orderly events consumer add %s) with this key.\n", c.Name)
	return nil
}

// CredentialsServiceRemoveCmd is orderly credentials service remove.
type CredentialsServiceRemoveCmd struct {
	credentialsDir
	Name string `arg:"" help:"The service's name."`
}

// Run deletes the key.
func (c *CredentialsServiceRemoveCmd) Run() error {
	creds, err := c.creds()
	if err != nil {
		return err
	}
	if err := creds.RemoveService(c.Name); err != nil {
		return err
	}
	fmt.Printf("service %s: key deleted and its account removed from %s; NATS drops it at its next start\n", c.Name, creds.ConfigPath())
	return nil
}

// CredentialsServiceListCmd is orderly credentials service list.
type CredentialsServiceListCmd struct {
	credentialsDir
}

// Run lists the services.
func (c *CredentialsServiceListCmd) Run() error {
	creds, err := c.creds()
	if err != nil {
		return err
	}
	names, err := creds.Services()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Printf("no consumer service has a key of its own in %s (they share the events user's key)\n", c.Dir)
		return nil
	}
	for _, name := range names {
		fmt.Printf("%-24s %s\n", name, creds.ServiceSeedPath(name))
	}
	return nil
}

// CredentialsInitCmd is orderly credentials init.
type CredentialsInitCmd struct {
	Dir             string   `name:"dir" arg:"" type:"path" help:"Directory for the seeds, the route password, the TLS files and the configuration fragments."`
	TLSHosts        []string `name:"tls-host" env:"ORDERLY_TLS_HOSTS" sep:"," help:"Names or addresses the NATS nodes are reached at, besides nats-1, nats-2, nats-3, localhost, 127.0.0.1 and ::1: the nodes' certificate (tls-node.pem) must hold every one that a client or a route dials. Repeat it or separate with commas."`
	AccountMaxStore string   `name:"account-max-store" env:"ORDERLY_ACCOUNT_MAX_STORE" placeholder:"SIZE" help:"Limit the JetStream storage of orderly's NATS account (such as 120GiB; every copy of a replicated stream counts, so an R3 cluster holds a third of it on each node), and alert before it (OrderlyAccountStorageNearLimit). At the limit new orders are answered 503 and the accepted ones wait, while the streams keep their leaders; set it below three times the nodes' max_file_store, whose overrun leaves the streams without leaders. Reload the nodes to take it. At least 4MiB; 0 removes it; empty keeps what the directory has (docs/operations.md)."`
}

// minAccountMaxStore is the smallest storage limit credentials init sets:
// a process stops saying it is ready 1 MiB below the limit (ADR 0032), and a
// number without a unit is bytes, so a limit of "10" or "500" (meant as
// gigabytes) made an account that could store no order.
const minAccountMaxStore = 4 << 20

// Validate checks the flags before anything is written (a TLS host the
// certificate cannot name was refused after the seeds were made).
func (c *CredentialsInitCmd) Validate() error {
	var errs []error
	for _, h := range c.TLSHosts {
		if !natsauth.ValidTLSHost(h) {
			errs = append(errs, fmt.Errorf("--tls-host %q: give a DNS name or an IP address", h))
		}
	}
	if c.AccountMaxStore != "" {
		limit, err := parseSize("--account-max-store", c.AccountMaxStore)
		switch {
		case err != nil:
			errs = append(errs, err)
		case limit > 0 && limit < minAccountMaxStore:
			errs = append(errs, fmt.Errorf("--account-max-store %s: below %s, the least it takes (that holds about a thousand orders: orderly stops being ready 1 MiB below the limit); a number without a unit is bytes: give a unit, such as 120GiB (0 removes the limit)",
				humanize.IBytes(uint64(limit)), humanize.IBytes(minAccountMaxStore)))
		}
	}
	return errors.Join(errs...)
}

// Run creates the credentials.
func (c *CredentialsInitCmd) Run() error {
	creds := natsauth.Credentials{Dir: c.Dir}
	// A directory of a cluster made before its routes had a password.
	_, confErr := os.Stat(creds.ConfigPath())
	_, routeErr := os.Stat(creds.RoutePasswordPath())
	newRoutePassword := confErr == nil && routeErr != nil
	newCredentials := confErr != nil
	if err := creds.Init(); err != nil {
		return err
	}
	if err := creds.Check(); err != nil {
		return err
	}
	oldLimit, err := creds.AccountMaxStore()
	if err != nil {
		return err
	}
	limit := oldLimit
	if c.AccountMaxStore != "" {
		if limit, err = parseSize("--account-max-store", c.AccountMaxStore); err != nil {
			return err
		}
		if err := creds.SetAccountMaxStore(limit); err != nil {
			return err
		}
	}
	issued, err := creds.InitTLS(c.TLSHosts)
	if err != nil {
		return err
	}
	if err := creds.CheckTLS(); err != nil {
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
	fmt.Printf("  %-10s %s\n", natsauth.RouteUser, creds.RoutePasswordPath())
	fmt.Printf("include %s from every nats-server's configuration, and %s from its cluster block; routes authenticate as user %s with the password of %s (deploy/nats/run.sh puts it into the route URLs)\n",
		creds.ConfigPath(), creds.RouteConfigPath(), natsauth.RouteUser, creds.RoutePasswordPath())
	fmt.Printf("  %-10s %s (for every orderly process: --nats-ca); the nodes' certificate %s, for %s, until %s\n", "TLS CA", creds.TLSPath(natsauth.TLSCAFile),
		creds.TLSPath(natsauth.TLSNodeFile), strings.Join(issued.Hosts, ", "), issued.Expires.Format(time.DateOnly))
	switch {
	case issued.CA && !newCredentials:
		fmt.Printf("a new TLS CA: restart every NATS node and every orderly process, which must all trust it (docs/operations.md, rotating NATS credentials)\n")
	case issued.Node && !issued.CA:
		fmt.Printf("the nodes' certificate was issued again (%s): reload the NATS nodes to take it (SIGHUP: nats-server --signal reload, or docker compose kill -s HUP nats-1 nats-2 nats-3); clients and routes keep trusting the same CA\n", issued.Reason)
	}
	switch {
	case limit == 0:
		fmt.Printf("the account %s has no JetStream storage limit (--account-max-store)\n", natsauth.Account)
	default:
		fmt.Printf("the account %s may store %s in JetStream, every copy counted (%s)\n", natsauth.Account, humanize.IBytes(uint64(limit)), creds.AccountMaxStorePath())
	}
	if limit != oldLimit && !newCredentials {
		fmt.Printf("the account's storage limit changed: reload the NATS nodes to take it (nats-server --signal reload, or docker compose kill -s HUP nats-1 nats-2 nats-3; orderly serve: restart it)\n")
	}
	if newRoutePassword {
		fmt.Printf("a new route password in a directory that had none: restart every NATS node of the cluster at once, with deploy/nats/node.conf and run.sh of this version (a node that asks for it refuses the routes of one that does not send it; docs/operations.md, rotating NATS credentials)\n")
	}
	return nil
}
