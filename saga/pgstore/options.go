package pgstore

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

// Option configures a Store, Migrate and MigrationSQL.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	table      string
	maxRecord  int
	logger     *slog.Logger
	cleanEvery time.Duration
	cleanBatch int
	locking    bool
}

// DefaultTable is the table a Store uses unless WithTable says otherwise.
const DefaultTable = "jetsaga_sagas"

// DefaultMaxRecordSize is the largest record a Store writes unless
// WithMaxRecordSize says otherwise: 1 MiB, the default largest message of
// nats-server (and so of kvstore).
const DefaultMaxRecordSize = 1 << 20

// DefaultCleanupInterval is how often Run removes expired rows unless
// WithCleanupInterval says otherwise.
const DefaultCleanupInterval = time.Minute

// cleanupBatch is how many expired rows one DELETE of Cleanup removes.
const cleanupBatch = 1000

// tablePattern is what WithTable accepts: a lowercase unquoted
// identifier, optionally schema-qualified. The store derives the names of
// its sequence, index and schema table from it by adding a suffix (at
// most "_expires_at"), so the table's own name is at most 52 bytes, and
// the derived names stay within PostgreSQL's 63.
var tablePattern = regexp.MustCompile(`^(?:[a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,51}$`)

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, maxRecord: DefaultMaxRecordSize, cleanEvery: DefaultCleanupInterval, cleanBatch: cleanupBatch}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// WithTable names the table (Default: DefaultTable, "jetsaga_sagas"):
// a lowercase identifier of letters, digits and underscores, at most 52
// bytes, optionally qualified by a schema ("billing.sagas"; the schema
// must exist). The store also uses a sequence (table + "_rev"), an index
// (table + "_expires_at") and a one-row table of the schema's version
// (table + "_schema"). Any other name is ErrInvalidOption: the name is
// written into SQL statements, and only a name that matches is.
func WithTable(name string) Option {
	return optionFunc(func(c *config) error {
		if !tablePattern.MatchString(name) {
			return fmt.Errorf("%w: table %q: want a lowercase identifier ([a-z_][a-z0-9_]*, at most 52 bytes), optionally schema-qualified", ErrInvalidOption, name)
		}
		c.table = name
		return nil
	})
}

// WithMaxRecordSize sets the largest record, in bytes, that Put and
// PutTTL write (Default: DefaultMaxRecordSize, 1 MiB); a larger one is
// ErrRecordTooLarge. At most 512 MiB (less than PostgreSQL's 1 GiB
// limit of a bytea value, which a record must also fit in encoded on the
// wire).
func WithMaxRecordSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 512<<20 {
			return fmt.Errorf("%w: max record size %d: want 1 to 512 MiB", ErrInvalidOption, n)
		}
		c.maxRecord = n
		return nil
	})
}

// WithLogger sets the logger of Run's background cleanup (Default:
// slog.Default()). Failures are logged at Warn, each pass at Debug.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		return nil
	})
}

// WithCleanupInterval sets how often Run removes expired rows (Default:
// DefaultCleanupInterval, a minute).
func WithCleanupInterval(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: cleanup interval %v: must be positive", ErrInvalidOption, d)
		}
		c.cleanEvery = d
		return nil
	})
}

// WithLocking makes a step lock its saga's row (Default: off, optimistic
// revisions only): Load in the step's transaction (see Begin) is a
// SELECT ... FOR UPDATE, so that another step on the same instance waits
// for this one to commit or roll back, rather than running its handler
// on the same revision and losing its commit (saga.ErrConflict, and the
// handler runs again, its writes rolled back). Worth it for hot
// instances, which many messages reach at once; each waiting step holds
// a connection of the pool meanwhile. Loads outside a step (the jetsaga
// command, CancelTimeouts) never lock, and the revision check of every
// write stays.
func WithLocking() Option {
	return optionFunc(func(c *config) error {
		c.locking = true
		return nil
	})
}
