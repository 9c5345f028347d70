package transport

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ReconnectForever returns the nats.Option a long-running service
// connects with: it never gives up reconnecting, and logs each change of
// the connection's state once with logger (slog.Default() if nil) —
// "nats: disconnected" at Warn, "nats: reconnected" at Info with how long
// the connection was away, "nats: connection closed" at Error — instead
// of a line per failed call.
//
//	nc, err := nats.Connect(url, transport.ReconnectForever(logger))
//
// nats.go's default gives up after 60 reconnect attempts (about two
// minutes): the connection then closes for good, every call fails with
// ErrClosed, and saga.Dispatcher.Run returns that error. With this option
// an outage of any length is waited for: calls made while the connection
// is away fail (or time out) and are tried again by the caller, and work
// resumes by itself once the server is back.
//
// It also pings the server every 20 s and counts the connection lost after
// three pings unanswered, so a server that vanished without closing the
// TCP connection (a host gone, a network black hole) is noticed within
// about a minute rather than nats.go's default of four to six.
//
// Options given after it to nats.Connect override what it sets, the state
// handlers included. nats.Connect still fails at once when no server is
// reachable when it is called; add nats.RetryOnFailedConnect(true) to
// wait for the first connection too.
func ReconnectForever(logger *slog.Logger) nats.Option {
	if logger == nil {
		logger = slog.Default()
	}
	var mu sync.Mutex
	var since time.Time // when the connection was lost; zero while connected
	return func(o *nats.Options) error {
		o.MaxReconnect = -1
		o.AllowReconnect = true
		o.PingInterval = 20 * time.Second
		o.MaxPingsOut = 3
		o.DisconnectedErrCB = func(nc *nats.Conn, err error) {
			mu.Lock()
			if since.IsZero() {
				since = time.Now()
			}
			mu.Unlock()
			logger.Warn("nats: disconnected; reconnecting until the server is back",
				slog.String("server", nc.ConnectedUrlRedacted()), slog.Any("error", err))
		}
		o.ReconnectedCB = func(nc *nats.Conn) {
			mu.Lock()
			away := time.Duration(0)
			if !since.IsZero() {
				away = time.Since(since)
			}
			since = time.Time{}
			mu.Unlock()
			logger.Info("nats: reconnected", slog.String("server", nc.ConnectedUrlRedacted()),
				slog.Duration("away", away))
		}
		o.ClosedCB = func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				logger.Error("nats: connection closed", slog.Any("error", err))
				return
			}
			logger.Info("nats: connection closed")
		}
		return nil
	}
}
