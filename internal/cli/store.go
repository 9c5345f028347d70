package cli

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/jetsaga/jetsaga/saga"
)

// StoreOpener opens the saga store that a store flag names (its value:
// a URL, say) for the commands to read and the operator's dispatcher to
// write. name says where the records are, for messages ("PostgreSQL
// table jetsaga_sagas"); close is called when the command ends.
type StoreOpener func(ctx context.Context, value string) (store saga.ListingStore, name string, close func(), err error)

// storeFlag is a saga store a binary built in (WithStore), and the value
// its flag was given.
type storeFlag struct {
	flag, env, usage string
	open             StoreOpener
	value            string
}

// WithStore adds a saga store that the flag --flag (or the environment
// variable env) selects instead of --bucket: with a value, the sagas
// commands and the console read the records from the store open opens.
// cmd/jetsaga registers none, so that the root module does not depend on
// a database driver; saga/pgstore/cmd/jetsaga adds --pg.
func WithStore(flag, env, usage string, open StoreOpener) Option {
	return func(c *runConfig) {
		c.stores = append(c.stores, &storeFlag{flag: flag, env: env, usage: usage, open: open})
	}
}

// registerStores adds the store flags to fs, defaulting to their
// environment variables.
func (rc runConfig) registerStores(fs *flag.FlagSet) {
	for _, s := range rc.stores {
		if s.value == "" {
			s.value = os.Getenv(s.env)
		}
		fs.StringVar(&s.value, s.flag, s.value, s.usage+" ($"+s.env+")")
	}
}

// openStore opens the store a store flag selects, if one does.
func (e *env) openStore(ctx context.Context) error {
	for _, s := range e.rc.stores {
		if s.value == "" {
			continue
		}
		if e.stateQueue != "" {
			return fmt.Errorf("%w: --%s and --state-queue name two stores; give one", ErrUsage, s.flag)
		}
		store, name, closeFn, err := s.open(ctx, s.value)
		if err != nil {
			return fmt.Errorf("--%s: %w", s.flag, err)
		}
		e.store, e.storeLabel = store, name
		if closeFn != nil {
			e.closers = append(e.closers, closeFn)
		}
		return nil
	}
	return nil
}
