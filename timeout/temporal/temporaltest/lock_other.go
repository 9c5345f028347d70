//go:build !unix

package temporaltest

import (
	"context"
	"errors"
	"os"
	"time"
)

// lockFile takes a lock on path by creating it exclusively, waiting for
// it until ctx ends. A lock left by a dead process expires after an hour.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) > time.Hour {
			os.Remove(path)
			continue
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
