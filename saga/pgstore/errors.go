package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jetsaga/jetsaga/saga"
)

var (
	// ErrInvalidOption is returned by New, Migrate and MigrationSQL for an
	// invalid option.
	ErrInvalidOption = errors.New("pgstore: invalid option")

	// ErrNeedsMigration is returned by New when the table's schema is
	// missing or older than this code's (SchemaVersion): apply the
	// migration (Migrate, or MigrationSQL with your own tool) first.
	ErrNeedsMigration = errors.New("pgstore: the table's schema is missing or older than this code's: apply the migration (pgstore.Migrate)")

	// ErrSchemaTooNew is returned by New when the table was migrated by a
	// newer version of pgstore that this code cannot work with: upgrade
	// the service.
	ErrSchemaTooNew = errors.New("pgstore: the table's schema is newer than this code can use")

	// ErrRecordTooLarge is returned (inside saga.Permanent: retrying cannot
	// make it smaller) by Put and PutTTL for a record larger than the
	// limit (WithMaxRecordSize). Nothing is written.
	ErrRecordTooLarge = errors.New("pgstore: record too large")
)

// storeErr describes a failed op (on key, if not empty). A failure to
// reach PostgreSQL — a refused or broken connection, a timeout, a server
// shutting down or starting up, no connection slots left — matches
// saga.ErrUnavailable as well, so that a dispatcher waits through the
// outage instead of counting it against the message's retries.
func storeErr(op, key string, err error) error {
	what := "pgstore: " + op
	if key != "" {
		what += " " + key
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %s: %w", saga.ErrUnavailable, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// unavailable reports whether err says that PostgreSQL could not be
// reached or could not serve for now, rather than that it refused the
// statement.
func unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now (starting up, recovering)
			pgErr.Code == "53300", // too_many_connections
			pgErr.Code == "53100": // disk_full
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || pgconn.Timeout(err) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}
