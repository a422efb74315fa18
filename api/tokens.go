package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync/atomic"
)

// Tokens is the API's set of bearer tokens, each kept as its SHA-256 hash
// with its tenant. Replace swaps the whole set while the API serves (orderly
// re-reads --tokens-file on SIGHUP), so a token is added, rotated or
// revoked without a restart. Whether the API authenticates at all is fixed
// when it starts: a set that was empty stays empty, and one that was not
// never becomes empty.
type Tokens struct {
	set     atomic.Pointer[map[[sha256.Size]byte]string]
	enabled bool
}

// TokenChange says what a Replace changed, without naming a token: the
// tokens added, removed and moved to another tenant are given by their
// TokenID, sorted.
type TokenChange struct {
	Tokens, Tenants       int
	Added, Removed, Moved []string
}

// TokenID names a token without showing it, in logs and in orderly tokens
// list: the first 8 hex digits of its SHA-256. They tell the tokens of one
// file apart and say nothing usable of a random token.
func TokenID(token string) string {
	return tokenID(sha256.Sum256([]byte(token)))
}

func tokenID(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:4]) }

func newTokens(tokens map[string]string) *Tokens {
	t := &Tokens{enabled: len(tokens) > 0}
	set := hashTokens(tokens)
	t.set.Store(&set)
	return t
}

func hashTokens(tokens map[string]string) map[[sha256.Size]byte]string {
	set := make(map[[sha256.Size]byte]string, len(tokens))
	for token, tenant := range tokens {
		set[sha256.Sum256([]byte(token))] = tenant
	}
	return set
}

// Replace makes tokens the API's set: a request authenticated after it
// returns is checked against them only. It refuses an empty set or an
// empty token or tenant, and an API that started without tokens, and then
// keeps the set it had.
func (t *Tokens) Replace(tokens map[string]string) (TokenChange, error) {
	if !t.enabled {
		return TokenChange{}, errors.New("the API started without tokens: it does not start authenticating while it runs; restart it with tokens")
	}
	if len(tokens) == 0 {
		return TokenChange{}, errors.New("no tokens: a running API keeps authenticating, so the new set must hold at least one")
	}
	for token, tenant := range tokens {
		if token == "" || tenant == "" {
			return TokenChange{}, errors.New("tokens and tenants must not be empty")
		}
	}
	set := hashTokens(tokens)
	old := *t.set.Swap(&set)
	c := TokenChange{Tokens: len(set)}
	tenants := make(map[string]bool)
	for h, tenant := range set {
		tenants[tenant] = true
		switch was, ok := old[h]; {
		case !ok:
			c.Added = append(c.Added, tokenID(h))
		case was != tenant:
			c.Moved = append(c.Moved, tokenID(h))
		}
	}
	for h := range old {
		if _, ok := set[h]; !ok {
			c.Removed = append(c.Removed, tokenID(h))
		}
	}
	c.Tenants = len(tenants)
	slices.Sort(c.Added)
	slices.Sort(c.Moved)
	slices.Sort(c.Removed)
	return c, nil
}

// tenant is the tenant of token, if it is one of the set.
func (t *Tokens) tenant(token string) (string, bool) {
	tenant, ok := (*t.set.Load())[sha256.Sum256([]byte(token))]
	return tenant, ok
}
