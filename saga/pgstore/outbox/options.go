package outbox

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

// Option configures a Table, Migrate and MigrationSQL.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	table  string
	logger *slog.Logger
	poll   time.Duration
	batch  int
}

// DefaultTable is the outbox table unless WithTable says otherwise.
const DefaultTable = "jetsaga_outbox"

// DefaultPollInterval is how often Run looks for rows when no
// notification wakes it, unless WithPollInterval says otherwise.
const DefaultPollInterval = 5 * time.Second

// DefaultBatchSize is how many rows one relay transaction takes, unless
// WithBatchSize says otherwise.
const DefaultBatchSize = 100

// tablePattern is what WithTable accepts: a lowercase unquoted
// identifier, optionally schema-qualified, short enough that the names
// derived from it (at most "_pending" added) stay within PostgreSQL's 63
// bytes.
var tablePattern = regexp.MustCompile(`^(?:[a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,54}$`)

func newConfig(opts []Option) (config, error) {
	c := config{table: DefaultTable, poll: DefaultPollInterval, batch: DefaultBatchSize}
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

// WithTable names the outbox table (Default: DefaultTable,
// "jetsaga_outbox"): a lowercase identifier of letters, digits and
// underscores, at most 55 bytes, optionally qualified by an existing
// schema ("billing.outbox"). Beside it live an index (table +
// "_pending") and a one-row table of the schema's version (table +
// "_schema"); the relay listens on the notification channel of the
// table's name. Any other name is ErrInvalidOption: the name is written
// into SQL statements, and only a name that matches is.
func WithTable(name string) Option {
	return optionFunc(func(c *config) error {
		if !tablePattern.MatchString(name) {
			return fmt.Errorf("%w: table %q: want a lowercase identifier ([a-z_][a-z0-9_]*, at most 55 bytes), optionally schema-qualified", ErrInvalidOption, name)
		}
		c.table = name
		return nil
	})
}

// WithLogger sets the relay's logger (Default: slog.Default()). A row
// refused for good is logged at Error, a failed pass at Warn.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		return nil
	})
}

// WithPollInterval sets how often Run looks for rows when no
// notification wakes it (Default: DefaultPollInterval, 5 s): the
// fallback for a notification missed while its connection was down.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: poll interval %v: must be positive", ErrInvalidOption, d)
		}
		c.poll = d
		return nil
	})
}

// WithBatchSize sets how many rows one relay transaction claims,
// publishes and deletes (Default: DefaultBatchSize, 100).
func WithBatchSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("%w: batch size %d: want 1 to 10000", ErrInvalidOption, n)
		}
		c.batch = n
		return nil
	})
}
