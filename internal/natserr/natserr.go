// Package natserr classifies nats.go's errors for the packages that talk
// to a NATS server.
package natserr

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Unavailable reports whether err says that the server, or the stream a
// request went to, could not answer — the connection is away, the request
// timed out, nothing answered it, or the stream has no leader or no
// quorum — rather than that it refused the request. Asking again later
// may work. A connection closed for good (nats.ErrConnectionClosed) is
// not unavailable: asking again cannot work.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, nats.ErrConnectionClosed) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case clusterNotAvail, clusterNotLeader, streamOffline, clusterNoPeers, insufficientResources:
			return true
		}
		return false
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrStaleConnection) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// nats-server's error codes that say the stream cannot answer for now.
const (
	clusterNotAvail       jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	clusterNotLeader      jetstream.ErrorCode = 10009 // not leader
	clusterNoPeers        jetstream.ErrorCode = 10005 // no suitable peers for placement
	insufficientResources jetstream.ErrorCode = 10023 // insufficient resources
	streamOffline         jetstream.ErrorCode = 10118 // stream is offline
)
