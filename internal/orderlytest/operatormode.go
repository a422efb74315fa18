package orderlytest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// OperatorNATS starts a nats-server in operator mode, as hosted NATS and
// deployments with decentralised auth run it: accounts are JWTs signed by an
// operator key (here in a memory resolver), users are JWTs signed by their
// account, and clients connect with a .creds file (orderly's --nats-creds).
// It has a system account and one account for orderly with JetStream, whose
// limits are tiers (per replica count: R1, R3) when tiers is not nil, else
// none. It returns the server's URL and the path of a .creds file of a user
// of that account with every permission. The test's end stops it.
func OperatorNATS(tb testing.TB, tiers jwt.JetStreamTieredLimits) (url, credsFile string) {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	key := func(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
		kp, err := create()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		return kp, pub
	}
	operator, operatorPub := key(nkeys.CreateOperator)
	_, systemPub := key(nkeys.CreateAccount)
	account, accountPub := key(nkeys.CreateAccount)
	claims := jwt.NewAccountClaims(accountPub)
	claims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	if tiers != nil {
		claims.Limits.JetStreamLimits = jwt.JetStreamLimits{}
		claims.Limits.JetStreamTieredLimits = tiers
	}
	resolver := &server.MemAccResolver{}
	for pub, c := range map[string]*jwt.AccountClaims{systemPub: jwt.NewAccountClaims(systemPub), accountPub: claims} {
		token, err := c.Encode(operator)
		must(err)
		must(resolver.Store(pub, token))
	}
	ns := RunNATS(tb, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		TrustedOperators: []*jwt.OperatorClaims{jwt.NewOperatorClaims(operatorPub)}, AccountResolver: resolver,
		SystemAccount: systemPub})
	user, userPub := key(nkeys.CreateUser)
	token, err := jwt.NewUserClaims(userPub).Encode(account)
	must(err)
	seed, err := user.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(token, seed)
	must(err)
	credsFile = filepath.Join(tb.TempDir(), "orderly.creds")
	must(os.WriteFile(credsFile, creds, 0o600))
	return ns.ClientURL(), credsFile
}
