package natsauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/orderly-dev/orderly/internal/filesync"
)

// AccountMaxStoreFile, in a credentials directory, holds the JetStream
// storage limit of the ORDERLY account in bytes (one decimal number); without
// it the account has none. Config writes it as the max_file of the account's
// jetstream block, so every node of a cluster enforces the same limit.
//
// Why an operator sets it below the nodes' own cap (max_file_store): at an
// account's limit each write of the account is refused ("resource limits
// exceeded for account") and nothing else changes, while a node over its
// cap stops its stream leaders and calls no election, so the streams have
// none (docs/nats-facts.md, 24). The limit counts every copy of a
// replicated stream, and the account's usage and limit can be read by any of
// its users ($JS.API.INFO), which the node's cap cannot.
const AccountMaxStoreFile = "account-max-store"

// AccountMaxStorePath is the path of the account's storage limit.
func (c Credentials) AccountMaxStorePath() string { return filepath.Join(c.Dir, AccountMaxStoreFile) }

// AccountMaxStore is the ORDERLY account's JetStream storage limit in bytes,
// 0 when it has none.
func (c Credentials) AccountMaxStore() (int64, error) {
	b, err := os.ReadFile(c.AccountMaxStorePath())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("credentials: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("credentials: %s: want a number of bytes above 0, got %q (orderly credentials init --account-max-store writes it)",
			c.AccountMaxStorePath(), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// SetAccountMaxStore records the ORDERLY account's JetStream storage limit
// (0: none) and writes nats-accounts.conf again with it. NATS nodes take it
// with a reload.
func (c Credentials) SetAccountMaxStore(bytes int64) error {
	switch {
	case bytes < 0:
		return fmt.Errorf("credentials: an account storage limit of %d bytes", bytes)
	case bytes == 0:
		if err := os.Remove(c.AccountMaxStorePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("credentials: %w", err)
		}
	default:
		if err := filesync.WriteFile(c.AccountMaxStorePath(), []byte(strconv.FormatInt(bytes, 10)+"\n"), 0o644); err != nil {
			return fmt.Errorf("credentials: %w", err)
		}
	}
	return c.writeConfig()
}

// jetStreamBlock is the account's jetstream setting in the configuration.
func (c Credentials) jetStreamBlock() (string, error) {
	limit, err := c.AccountMaxStore()
	if err != nil || limit == 0 {
		return "enabled", err
	}
	return fmt.Sprintf("{ max_file: %d }", limit), nil
}
