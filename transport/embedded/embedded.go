package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/logger"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrNotReady is returned when the server does not accept connections in time.
var ErrNotReady = errors.New("embedded: nats-server not ready")

// ErrAddrInUse is returned when the server cannot listen on a port it was
// given (client, route or monitoring) because something else holds it.
// Restart retries such a port until ReadyTimeout; StartCluster picks
// fresh ports.
var ErrAddrInUse = errors.New("embedded: address in use")

// Options configure an embedded server. The zero value is a loopback
// server on a random port with a temporary store directory.
type Options struct {
	// Host to listen on. Default: "127.0.0.1".
	Host string
	// Port to listen on. Default: 0, a random free port.
	Port int
	// StoreDir holds JetStream's files. Default: a new temporary directory,
	// removed by Shutdown.
	StoreDir string
	// MaxPayload is the largest message the server accepts, in bytes.
	// Default: 1 MiB, nats-server's default.
	MaxPayload int32
	// SyncAlways makes the server fsync every write before acknowledging
	// it, so an acknowledged message survives a power loss, at a large cost
	// in throughput. Default: false: writes reach the OS at once (they
	// survive a process crash) and are fsynced every 2 minutes.
	SyncAlways bool
	// Debug enables the server's own logging to stderr. Default: false.
	Debug bool
	// Logger receives the server's warnings and errors (a stream whose
	// store cannot be created, a disk that is full, a route that fails),
	// as "nats-server: ..." at Warn and Error. Default: nil, dropped
	// (with Debug they go to stderr too).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default: 10s.
	ReadyTimeout time.Duration

	// The fields below make the server a node of a JetStream cluster;
	// StartCluster sets them. A server without ClusterName is standalone.

	// ServerName names the server; the nodes of a cluster need distinct
	// names. Default: "jetsaga-embedded".
	ServerName string
	// ClusterName is the name of the cluster the server joins.
	ClusterName string
	// ClusterPort is the port the server listens on for routes from the
	// other nodes. It must be fixed (not 0) for a node that restarts.
	ClusterPort int
	// ClusterAdvertise is the host:port the server tells the other nodes
	// to reach its route listener at. Default: the listener itself.
	ClusterAdvertise string
	// Routes are the other nodes' route URLs (nats-route://host:port).
	Routes []string
	// MonitorPort is the port of the server's HTTP monitoring endpoint
	// (/healthz, /jsz, ...). Default: 0, none.
	MonitorPort int
}

// Server is a running embedded nats-server.
type Server struct {
	ns      *server.Server
	opts    Options
	tempDir bool
}

// Start starts a server and waits until it accepts connections.
func Start(opts Options) (*Server, error) {
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	s := &Server{opts: opts}
	if s.opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "jetsaga-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded: store dir: %w", err)
		}
		s.opts.StoreDir, s.tempDir = dir, true
	}
	if err := s.start(); err != nil {
		s.removeTemp()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	port := s.opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := s.opts.ServerName
	if name == "" {
		name = "jetsaga-embedded"
	}
	so := &server.Options{
		ServerName: name,
		Host:       s.opts.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   s.opts.StoreDir,
		MaxPayload: s.opts.MaxPayload,
		NoSigs:     true,
		NoLog:      !s.opts.Debug,
		SyncAlways: s.opts.SyncAlways,
	}
	if s.opts.MonitorPort != 0 {
		so.HTTPHost, so.HTTPPort = s.opts.Host, s.opts.MonitorPort
	}
	if s.opts.ClusterName != "" {
		so.Cluster = server.ClusterOpts{
			Name:      s.opts.ClusterName,
			Host:      s.opts.Host,
			Port:      s.opts.ClusterPort,
			Advertise: s.opts.ClusterAdvertise,
		}
		so.Routes = server.RoutesFromStr(strings.Join(s.opts.Routes, ","))
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	// nats-server reports a listener it cannot open through its logger's
	// Fatalf and then never gets ready: catch that, so that a port taken
	// fails the start at once.
	fl := &fatalLogger{fatal: make(chan string, 1), slog: s.opts.Logger}
	if s.opts.Debug {
		fl.inner = logger.NewStdLogger(true, false, false, true, true) // as ConfigureLogger makes it
	}
	ns.SetLogger(fl, false, false)
	go ns.Start()
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		var err error
		select {
		case msg := <-fl.fatal:
			err = fmt.Errorf("embedded: nats-server: %s", msg)
			if isAddrInUse(msg) {
				err = fmt.Errorf("%w: %s", ErrAddrInUse, msg)
			}
		default:
			if time.Now().After(deadline) {
				err = fmt.Errorf("%w after %v", ErrNotReady, s.opts.ReadyTimeout)
			}
		}
		if err != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
			return err
		}
	}
	s.ns = ns
	// Keep the port across Restart so clients reconnect to the same URL.
	s.opts.Port = ns.Addr().(*net.TCPAddr).Port
	return nil
}

// ClientURL returns the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// ID returns the server's ID, new at each start.
func (s *Server) ID() string { return s.ns.ID() }

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Connect opens a client connection to the server. It retries reconnects
// forever, so that the connection survives a Restart.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{nats.Name("jetsaga"), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	return nats.Connect(s.ClientURL(), append(base, opts...)...)
}

// Restart shuts the server down gracefully and starts it again on the same
// port and store directory, as an operator restarting nats-server would.
// Should another process have taken one of its ports meanwhile, it tries
// again until ReadyTimeout.
func (s *Server) Restart() error {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	return retryBind(s.opts.ReadyTimeout, s.start)
}

// retryBind calls start until it succeeds, fails otherwise than with
// ErrAddrInUse, or within has passed.
func retryBind(within time.Duration, start func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := start()
		if !errors.Is(err, ErrAddrInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(bindRetryWait) // waiting for the port's holder to let go; there is nothing to watch
	}
}

// bindRetryWait is the pause between two tries to listen on a taken port.
const bindRetryWait = 100 * time.Millisecond

// fatalLogger passes nats-server's log on to inner (if set) and reports
// its first fatal error on fatal. It never exits the process.
type fatalLogger struct {
	inner server.Logger
	slog  *slog.Logger // Options.Logger: warnings and errors
	fatal chan string
}

func (l *fatalLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if l.inner != nil {
		l.inner.Errorf("%s", msg)
	}
	l.report(slog.LevelError, msg)
	select {
	case l.fatal <- msg:
	default:
	}
}

func (l *fatalLogger) Noticef(format string, v ...any) { l.log(server.Logger.Noticef, format, v) }
func (l *fatalLogger) Warnf(format string, v ...any) {
	l.log(server.Logger.Warnf, format, v)
	l.report(slog.LevelWarn, fmt.Sprintf(format, v...))
}
func (l *fatalLogger) Errorf(format string, v ...any) {
	l.log(server.Logger.Errorf, format, v)
	l.report(slog.LevelError, fmt.Sprintf(format, v...))
}

// report gives msg to Options.Logger, if any.
func (l *fatalLogger) report(level slog.Level, msg string) {
	if l.slog != nil {
		l.slog.Log(context.Background(), level, "nats-server: "+msg)
	}
}
func (l *fatalLogger) Debugf(format string, v ...any) { l.log(server.Logger.Debugf, format, v) }
func (l *fatalLogger) Tracef(format string, v ...any) { l.log(server.Logger.Tracef, format, v) }

func (l *fatalLogger) log(f func(server.Logger, string, ...any), format string, v []any) {
	if l.inner != nil {
		f(l.inner, format, v...)
	}
}

// isAddrInUse reports whether a nats-server fatal error says a port was
// taken (Linux and macOS say "address already in use", Windows "Only one
// usage of each socket address").
func isAddrInUse(msg string) bool {
	return strings.Contains(msg, "address already in use") || strings.Contains(msg, "Only one usage of each socket address")
}

// Shutdown stops the server gracefully and waits until it has stopped. A
// temporary store directory is removed.
func (s *Server) Shutdown() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	s.removeTemp()
}

func (s *Server) removeTemp() {
	if s.tempDir {
		os.RemoveAll(s.opts.StoreDir)
	}
}
