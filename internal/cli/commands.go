package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// opts are every flag's value; each command registers the ones it takes.
type opts struct {
	conn    connOpts
	json    bool
	yes     bool
	from    string
	max     int
	state   string
	body    bool
	reason  string
	typ     string
	since   string
	until   string
	all     bool
	newID   bool
	to      string
	toTopic string
	limit   int
	after   string
	queue   string
	saga    string
	id      string
	idle    time.Duration
	engine  string
	format  string // sagas diagram

	listen       string
	token        string
	allowActions bool

	sched schedOpts // schedules_ops.go
}

// flag kinds a command can take.
const (
	fJSON = 1 << iota
	fYes
	fBrowse
	fFilter
	fPage
	fTimeouts
	fConsole
	fQueue
	fNewID
	fIdle
	fState
	fMigrate   // --saga, --to ENGINE, --engine
	fSchedules // schedules_ops.go
	fFormat    // --format: sagas diagram
)

// register adds the connection flags, and the flags cmd takes (none for
// the root), to fs. Values parsed before stay the defaults.
// defaults sets the connection defaults from the environment, as the
// nats CLI reads it.
func (o *opts) defaults() {
	c := &o.conn
	c.server = envOr("NATS_URL", "")
	c.creds = envOr("NATS_CREDS", "")
	c.nkey = envOr("NATS_NKEY", "")
	c.user = envOr("NATS_USER", "")
	c.password = envOr("NATS_PASSWORD", "")
	c.tlsCert = envOr("NATS_CERT", "")
	c.tlsKey = envOr("NATS_KEY", "")
	c.tlsCA = envOr("NATS_CA", "")
	c.prefix = envOr("JETSAGA_PREFIX", "JETSAGA")
	c.bucket = envOr("JETSAGA_BUCKET", "jetsaga_sagas")
	c.stateQueue = envOr("JETSAGA_STATE_QUEUE", "")
	c.timeout = 5 * time.Second
	c.temporalAddress = envOr("TEMPORAL_ADDRESS", "")
	c.temporalNamespace = envOr("TEMPORAL_NAMESPACE", "")
}

func (o *opts) register(fs *flag.FlagSet, cmd *command) {
	c := &o.conn
	fs.StringVar(&c.server, "server", c.server, "NATS server URLs, comma-separated seeds ($NATS_URL)")
	fs.StringVar(&c.server, "s", c.server, "short for --server")
	fs.StringVar(&c.creds, "creds", c.creds, "user credentials file ($NATS_CREDS)")
	fs.StringVar(&c.nkey, "nkey", c.nkey, "NKEY seed file ($NATS_NKEY)")
	fs.StringVar(&c.user, "user", c.user, "user name ($NATS_USER)")
	fs.StringVar(&c.password, "password", c.password, "password ($NATS_PASSWORD)")
	fs.StringVar(&c.tlsCert, "tlscert", c.tlsCert, "TLS client certificate file ($NATS_CERT)")
	fs.StringVar(&c.tlsKey, "tlskey", c.tlsKey, "TLS client key file ($NATS_KEY)")
	fs.StringVar(&c.tlsCA, "tlsca", c.tlsCA, "TLS CA file to verify the server ($NATS_CA)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "connect and JetStream API timeout")
	fs.StringVar(&c.prefix, "prefix", c.prefix, "the transport's stream prefix, transport.WithPrefix ($JETSAGA_PREFIX)")
	fs.StringVar(&c.bucket, "bucket", c.bucket, "the saga state KV bucket, kvstore.Config.Bucket ($JETSAGA_BUCKET)")
	fs.StringVar(&c.stateQueue, "state-queue", c.stateQueue, "read saga state from this queue's state (saga/queuestore) instead of --bucket ($JETSAGA_STATE_QUEUE)")
	fs.StringVar(&c.temporalAddress, "temporal-address", c.temporalAddress, "Temporal frontend host:port, for timeouts on the Temporal engine ($TEMPORAL_ADDRESS; needs a build with that engine)")
	fs.StringVar(&c.temporalNamespace, "temporal-namespace", c.temporalNamespace, "Temporal namespace ($TEMPORAL_NAMESPACE; default \"default\")")
	fs.BoolVar(&o.json, "json", o.json, "print JSON instead of tables")
	if cmd == nil {
		fs.BoolVar(&o.yes, "yes", false, "do destructive commands without asking")
		return
	}
	k := cmd.flags
	if k&fYes != 0 {
		fs.BoolVar(&o.yes, "yes", o.yes, "do it without asking (required when stdin is not a terminal)")
		fs.BoolVar(&o.yes, "y", o.yes, "short for --yes")
	}
	if k&fBrowse != 0 {
		fs.StringVar(&o.from, "from", "0", "first sequence number: decimal, or PARTITION:LOCAL (active) / PARTITION:sLOCAL (scheduled)")
		fs.IntVar(&o.max, "max", cmd.defMax, "at most this many messages")
		fs.BoolVar(&o.body, "body", cmd.defBody, "include message bodies")
	}
	if k&fState != 0 {
		fs.StringVar(&o.state, "state", "all", "active, scheduled or all")
	}
	if k&fFilter != 0 {
		fs.StringVar(&o.reason, "reason", "", "only dead letters with this reason")
		fs.StringVar(&o.typ, "type", "", "only messages of this type (the jetsaga-type property)")
		fs.StringVar(&o.since, "since", "", "only messages enqueued (dead-lettered) at or after: RFC 3339 or a duration ago (1h)")
		fs.StringVar(&o.until, "until", "", "only messages enqueued (dead-lettered) before: RFC 3339 or a duration ago")
	}
	if k&fPage != 0 {
		fs.IntVar(&o.limit, "limit", 50, "instances per page")
		fs.StringVar(&o.after, "after", "", "list instances with IDs after this one (the previous page's next)")
	}
	if k&fTimeouts != 0 {
		fs.StringVar(&o.saga, "saga", "", "only timeouts of this saga type")
		fs.StringVar(&o.id, "id", "", "only timeouts of this instance ID (with --saga)")
	}
	if k&fMigrate != 0 {
		fs.StringVar(&o.saga, "saga", "", "the saga type (required)")
		if cmd.path == "timeouts migrate" {
			fs.StringVar(&o.to, "to", "", "the engine to move the timeouts to: queue (JetStream) or temporal (required)")
			fs.StringVar(&o.engine, "from", "", "move only the timeouts on this engine (default: every engine but --to)")
		} else {
			fs.StringVar(&o.engine, "engine", "", "the engine to report on: queue (JetStream) or temporal (required)")
		}
	}
	if k&(fTimeouts|fQueue) != 0 {
		fs.StringVar(&o.queue, "queue", "", "the dispatcher's queue (default: every queue, or the one the timeouts name)")
	}
	if k&fNewID != 0 {
		fs.BoolVar(&o.all, "all", false, "every dead letter of the queue")
		fs.BoolVar(&o.newID, "new-id", false, "send under a new MessageID derived from the dead letter (for one dead-lettered within its queue's DuplicateWindow)")
		fs.StringVar(&o.to, "to", "", "send to this queue instead of the one the dead letters came from (required, or --to-topic, for a subscription's)")
		fs.StringVar(&o.toTopic, "to-topic", "", "send to this topic: every subscription whose filter passes a message gets it again")
	}
	if k&fIdle != 0 {
		if k&fNewID == 0 {
			fs.BoolVar(&o.all, "all", false, "every dead letter of the queue")
		}
		fs.DurationVar(&o.idle, "wait", 2*time.Second, "stop when no selected dead letter is received for this long")
	}
	if k&fSchedules != 0 {
		o.sched.register(fs)
	}
	if k&fFormat != 0 {
		fs.StringVar(&o.format, "format", "mermaid", "mermaid (text) or svg (a self-contained drawing)")
	}
	if k&fConsole != 0 {
		fs.StringVar(&o.listen, "listen", "127.0.0.1:8470", "address to serve on (a non-loopback one needs --token)")
		fs.StringVar(&o.token, "token", envOr("JETSAGA_CONSOLE_TOKEN", ""), "require this token: Authorization: Bearer, or ?token= once ($JETSAGA_CONSOLE_TOKEN)")
		fs.BoolVar(&o.allowActions, "allow-actions", false, "allow cancelling scheduled messages and resubmitting dead letters from the console")
	}
}

// command is one jetsaga command.
type command struct {
	path     string // "queues list"
	args     string // positional arguments, for usage
	minArgs  int
	maxArgs  int // -1: any
	short    string
	long     string
	examples []string
	flags    int
	defMax   int
	defBody  bool
	noConn   bool
	run      func(*call) error
}

// commands are cmds.go's, then groups in files of their own that append
// theirs in init (schedules_ops.go), in file name order.
var commands []*command

func lookup(args []string) (*command, int) {
	var best *command
	n := 0
	for _, c := range commands {
		words := strings.Fields(c.path)
		if len(words) <= len(args) && strings.Join(args[:len(words)], " ") == c.path && len(words) > n {
			best, n = c, len(words)
		}
	}
	return best, n
}

func group(word string) string {
	for _, c := range commands {
		if g, _, ok := strings.Cut(c.path, " "); ok && g == word {
			return g
		}
	}
	return ""
}

const exitCodes = `Exit codes:
  0  ok
  1  error (connection, server, I/O)
  2  usage (bad flags or arguments)
  3  not found (queue, message, sequence number, saga instance, saga diagram)
  4  already activated (a scheduled message that has been or will be delivered)
  5  aborted (not confirmed: declined, or stdin not a terminal without --yes)
  6  done in part (a batch left some items: see its output)
  7  stuck instances found (sagas stuck: listed on stdout)
`

func (c *call) usage(w io.Writer) {
	fmt.Fprint(w, `jetsaga operates jetsaga queues, topics, scheduled messages, dead letters, sagas and
their timeouts on a NATS server.

Usage: jetsaga [connection flags] COMMAND [flags] [args]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, cmd := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", cmd.path, cmd.args, cmd.short)
	}
	tw.Flush()
	fmt.Fprint(w, "\nPlugins (a program jetsaga-NAME on PATH runs as jetsaga NAME):\n")
	for _, p := range knownPlugins {
		fmt.Fprintf(tw, "  %s\t%s\n  \t  %s\n", p.name, p.short, p.install)
	}
	tw.Flush()
	fmt.Fprint(w, `
Connection: --server URLs (comma-separated) or $NATS_URL, --creds, --nkey,
--user/--password, --tlscert/--tlskey/--tlsca, --prefix (default JETSAGA),
--bucket (default jetsaga_sagas), or --state-queue QUEUE for saga state kept
in a queue (saga/queuestore). Every command takes --json and --help.

`+exitCodes)
}

func (c *call) groupUsage(w io.Writer, g string) {
	fmt.Fprintf(w, "jetsaga %s commands:\n", g)
	for _, cmd := range commands {
		if strings.HasPrefix(cmd.path, g+" ") {
			fmt.Fprintf(w, "  jetsaga %s %s\t%s\n", cmd.path, cmd.args, cmd.short)
		}
	}
}

func (c *call) commandUsage(w io.Writer, cmd *command) {
	fmt.Fprintf(w, "Usage: jetsaga %s [flags] %s\n\n%s\n", cmd.path, cmd.args, cmd.short)
	if cmd.long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.long))
	}
	if len(cmd.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range cmd.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fs := flag.NewFlagSet(cmd.path, flag.ContinueOnError)
	var o opts
	o.defaults()
	o.register(fs, cmd)
	c.rc.registerStores(fs)
	fmt.Fprintf(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\n%s", exitCodes)
}

func (c *call) help(args []string) error {
	if len(args) == 0 {
		c.usage(c.stdout)
		return nil
	}
	cmd, _ := lookup(args)
	if cmd == nil {
		if g := group(args[0]); g != "" {
			c.groupUsage(c.stdout, g)
			return nil
		}
		return fmt.Errorf("%w: no command %q", ErrUsage, strings.Join(args, " "))
	}
	c.commandUsage(c.stdout, cmd)
	return nil
}
