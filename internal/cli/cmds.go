package cli

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

func init() {
	commands = []*command{
		{path: "queues list", maxArgs: 0, short: "list queues with their active, scheduled and dead-lettered counts",
			long: `The counts are the transport's (transport.Queue.Counts), read from the
server's bookkeeping without browsing messages. Active counts include
received messages that are still locked. Topics and their subscriptions:
jetsaga topics list.`,
			examples: []string{"jetsaga queues list", "jetsaga --server nats://n1:4222,nats://n2:4222 --creds ops.creds queues list --json"},
			flags:    fJSON, run: cmdQueuesList},
		{path: "queues browse", args: "QUEUE", minArgs: 1, maxArgs: 1,
			short: "browse a queue's active and scheduled messages from a sequence number",
			long: `Lists messages in sequence order without receiving them: state, sequence
number (partition and local part), enqueued and scheduled times, type,
MessageID and properties. QUEUE may be "orders/$DeadLetterQueue" for the
dead-letter queue (see also dlq list), a topic's subscription
"events/Subscriptions/billing" (its active messages, with the topic's
sequence numbers), or a subscription's dead-letter queue
"events/Subscriptions/billing/$DeadLetterQueue". The last line names the
--from of the next page.`,
			examples: []string{"jetsaga queues browse orders", "jetsaga queues browse orders --state scheduled --max 20",
				"jetsaga queues browse orders --from 0:s120 --json", "jetsaga queues browse 'orders/$DeadLetterQueue'",
				"jetsaga queues browse events/Subscriptions/billing"},
			flags: fJSON | fBrowse | fState | fFilter, defMax: 50, run: cmdQueuesBrowse},
		{path: "queues show", args: "QUEUE", minArgs: 1, maxArgs: 1,
			short: "show a queue's counts and the work waiting per PartitionKey (top keys)",
			long: `The counts, as queues list. Then the keys (transport.Message.PartitionKey:
a tenant's, a saga instance's) with the most messages waiting, active and
scheduled, from a browse of at most --max messages from --from: the line
"read N of the queue's messages" says how many were read, and whether that
was all of them. A saga's timeouts carry their instance's key.`,
			examples: []string{"jetsaga queues show orders", "jetsaga queues show orders --max 100000 --json"},
			flags:    fJSON | fBrowse, defMax: 10_000, run: cmdQueuesShow},
		{path: "queues peek", args: "QUEUE [SEQ]", minArgs: 1, maxArgs: 2,
			short:    "show the message at or after SEQ in full, body included",
			examples: []string{"jetsaga queues peek orders 42", "jetsaga queues peek orders 0:s7 --json"},
			flags:    fJSON | fBrowse, defMax: 1, defBody: true, run: cmdQueuesPeek},
		{path: "topics list", maxArgs: 0,
			short: "list topics with their counts, and each subscription with its filter and counts",
			long: `Per topic: partitions, FilterProperties, active messages (some
subscription has not completed them) and scheduled ones. Per subscription
(TOPIC/Subscriptions/NAME, the path the queues and dlq commands take):
its filter, active messages, pending ones (not handed to a receiver yet)
and dead-lettered ones. A saga endpoint's subscription is named
<queue>-<8 hex digits>.`,
			examples: []string{"jetsaga topics list", "jetsaga topics list --json"},
			flags:    fJSON, run: cmdTopicsList},
		{path: "topics browse", args: "TOPIC", minArgs: 1, maxArgs: 1,
			short: "browse a topic's active and scheduled messages from a sequence number",
			long: `As queues browse, on the topic itself: scheduled messages not activated yet,
and active ones some subscription has not completed. A subscription's
messages: jetsaga queues browse TOPIC/Subscriptions/NAME.`,
			examples: []string{"jetsaga topics browse events", "jetsaga topics browse events --state scheduled --json"},
			flags:    fJSON | fBrowse | fState | fFilter, defMax: 50, run: cmdTopicsBrowse},
		{path: "topics peek", args: "TOPIC [SEQ]", minArgs: 1, maxArgs: 2,
			short:    "show a topic's message at or after SEQ in full, body included",
			examples: []string{"jetsaga topics peek events 0:s3"},
			flags:    fJSON | fBrowse, defMax: 1, defBody: true, run: cmdTopicsPeek},
		{path: "topics cancel", args: "TOPIC SEQ...", minArgs: 2, maxArgs: -1,
			short:    "cancel scheduled messages of a topic by sequence number, with a definite outcome",
			long:     `Outcomes and exit codes as for scheduled cancel.`,
			examples: []string{"jetsaga topics cancel events 0:s3 --yes"},
			flags:    fJSON | fYes, run: cmdTopicsCancel},
		{path: "scheduled cancel", args: "QUEUE SEQ...", minArgs: 2, maxArgs: -1,
			short: "cancel scheduled messages by sequence number, with a definite outcome",
			long: `Each outcome is definite: cancelled (it will never be delivered),
already-activated (it has been or will be delivered; exit 4), or not-found
(no scheduled message with that number is pending: cancelled before, or
never issued; exit 3). With several numbers the exit code is that of the
first one not cancelled. Cancelling a saga's timeout this way leaves the
saga waiting for it: prefer sagas cancel-timeouts.`,
			examples: []string{"jetsaga scheduled cancel orders 140737488355329 --yes", "jetsaga scheduled cancel orders 0:s1 0:s2"},
			flags:    fJSON | fYes, run: cmdScheduledCancel},
		{path: "dlq list", args: "QUEUE", minArgs: 1, maxArgs: 1,
			short: "list a queue's dead letters with reason and description",
			long: `QUEUE is a queue, or a topic's subscription (TOPIC/Subscriptions/NAME): each
has its own dead-letter queue.`,
			examples: []string{"jetsaga dlq list orders", "jetsaga dlq list orders --reason PermanentError --since 1h --json",
				"jetsaga dlq list events/Subscriptions/billing"},
			flags: fJSON | fBrowse | fFilter, defMax: 100, run: cmdDLQList},
		{path: "dlq resubmit", args: "QUEUE [SEQ...]", minArgs: 1, maxArgs: -1,
			short: "send dead letters back to their queue, keeping their MessageID",
			long: `Select dead letters by sequence number, by --reason, --type, --since,
--until, or --all. Each is sent back to QUEUE as it was first sent, under its
MessageID, so that a replay is idempotent (the transport's duplicate
detection, and a saga's inbox); one without a MessageID gets one derived from
the dead letter, the same on every resubmit. It is removed from the
dead-letter queue once sent. Outcomes: resubmitted; duplicate (the queue still
remembers the MessageID because the message was first sent within its
DuplicateWindow: nothing is sent, the dead letter stays; wait for the window
or use --new-id; exit 6); gone (received by someone else meanwhile; exit 6).

QUEUE may be a topic's subscription (TOPIC/Subscriptions/NAME). Its dead
letters need a destination: --to QUEUE, a queue whose receiver handles
them (for a saga endpoint's subscription, <queue>-<8 hex digits>, the
endpoint's queue: its dispatcher handles the same types there), or
--to-topic TOPIC, which every subscription whose filter passes a message
gets again. --to also sends a queue's dead letters to another queue.`,
			examples: []string{"jetsaga dlq resubmit orders 17 --yes", "jetsaga dlq resubmit orders --reason RetriesExhausted --since 2h",
				"jetsaga dlq resubmit orders --all --yes --json", "jetsaga dlq resubmit events/Subscriptions/orders-1a2b3c4d --all --to orders --yes"},
			flags: fJSON | fYes | fFilter | fNewID | fIdle, run: cmdDLQResubmit},
		{path: "dlq purge", args: "QUEUE [SEQ...]", minArgs: 1, maxArgs: -1,
			short: "remove dead letters for good",
			long: `Select as for resubmit. --all alone purges the dead-letter stream at once;
with filters each selected dead letter is received and removed. QUEUE may
be a topic's subscription (TOPIC/Subscriptions/NAME).`,
			examples: []string{"jetsaga dlq purge orders 3 4 --yes", "jetsaga dlq purge orders --all --yes"},
			flags:    fJSON | fYes | fFilter | fIdle, run: cmdDLQPurge},
		{path: "sagas list", args: "[SAGA]", maxArgs: 1,
			short: "list saga types, or the instances of one (paged, by ID)",
			long: `Without SAGA, lists the saga types in the bucket with their instance counts
(completed instances' tombstones included). With SAGA, lists its instances in
ID order, --limit per page; pass the page's "next" as --after for the next.`,
			examples: []string{"jetsaga sagas list", "jetsaga sagas list twofactor --limit 20", "jetsaga sagas list twofactor --after l42 --json"},
			flags:    fJSON | fPage, run: cmdSagasList},
		{path: "sagas find", args: "SAGA NAME=VALUE", minArgs: 2, maxArgs: 2,
			short: "find the instances whose index NAME holds VALUE (saga.Index), paged, by ID",
			long: `Runs saga.Lookup, as saga.Find does: the live instances of SAGA whose index
NAME holds VALUE, in ID order, --limit per page; pass the page's "next" as
--after for the next. Completed instances have left their indexes. An index
added to a saga that already had instances finds the older ones only once
the application rebuilt it (saga.Dispatcher.Reindex); until then this
command says the index is being built. VALUE is taken as is, after the
first "=" (quote it for the shell); it is never a subject or a pattern.`,
			examples: []string{"jetsaga sagas find order customer=c-17", "jetsaga sagas find order payment=pay_3MtwBw --json | jq -r '.instances[].id'",
				"jetsaga sagas find order customer=c-17 --limit 20 --after o-120"},
			flags: fJSON | fPage, run: cmdSagasFind},
		{path: "sagas reindex", args: "SAGA", minArgs: 1, maxArgs: 1,
			short: "ask the dispatchers that run SAGA to rebuild its indexes (after an index was added)",
			long: `Sends saga.RequestReindex's message to --queue, the queue of the application's
dispatchers that run SAGA (required): one of them runs saga.Dispatcher.Reindex,
which indexes the instances written before an index existed, beside live
traffic, and is idempotent (a dispatcher that dies meanwhile leaves the request
to another, which resumes). The index functions are the application's code,
so this command only asks. While the rebuild runs, sagas find says the index
is being built; a request a dispatcher cannot carry out (it does not run SAGA,
or SAGA has no index) is dead-lettered on the queue with the reason.`,
			examples: []string{"jetsaga sagas reindex order --queue orders", "jetsaga sagas reindex order --queue orders --json"},
			flags:    fJSON | fQueue, run: cmdSagasReindex},
		{path: "sagas show", args: "SAGA ID", minArgs: 2, maxArgs: 2,
			short: "show an instance: state as JSON, pending timeouts with due times and engine, inbox size, last update",
			long: `An instance of a saga with saga.CheckLiveness also shows what its last step
declared it waits for (saga.Context.Expect): the expected messages' names
("expects" in --json, empty if none), and "stuck" when it expects none and
has no pending timeout (as sagas stuck lists it).`,
			examples: []string{"jetsaga sagas show twofactor l1", "jetsaga sagas show twofactor l1 --json | jq .data",
				"jetsaga sagas show approval r2 --json | jq .expects"},
			flags: fJSON, run: cmdSagasShow},
		{path: "sagas cancel-timeouts", args: "SAGA ID", minArgs: 2, maxArgs: 2,
			short: "cancel every pending timeout of an instance, as a step on it",
			long: `Runs saga.Dispatcher.CancelTimeouts: the cancel is committed in the
instance's record (optimistic concurrency: it never races the application's
steps), so the saga no longer waits for the timeouts, and then the timeouts
are cancelled on their engines. No saga definitions are needed. --queue is
the application dispatcher's queue; by default the one the timeouts' refs
name. A timeout on an engine this binary lacks (Temporal) is forgotten in the
record and cancelled on its engine by the application's dispatcher.`,
			examples: []string{"jetsaga sagas cancel-timeouts twofactor l1 --yes", "jetsaga sagas cancel-timeouts orders o-17 --queue orders --json --yes"},
			flags:    fJSON | fYes | fQueue, run: cmdSagasCancel},
		{path: "sagas stuck", args: "[SAGA]", maxArgs: 1,
			short: "list stuck instances: running, waiting for no timeout and no message",
			long: `Runs saga.Dispatcher.StuckInstances: the running instances of SAGA (of every
saga type by default) whose saga has saga.CheckLiveness and whose last step
left them with no pending timeout and no expected message
(saga.Context.Expect). Nothing will move them on: complete them, or send the
message they should wait for. It reads every record of the saga type. Saga
types without CheckLiveness are never listed.

It exits 7 when it lists any stuck instance and 0 when there is none, so
that a check run from cron or an alerting system tells the two apart, and
both from a failure to look (1, or 2 and 3 for a bad command line or a
missing bucket).`,
			examples: []string{"jetsaga sagas stuck", "jetsaga sagas stuck approval --json",
				"jetsaga sagas stuck >stuck.txt || notify-oncall stuck.txt   # 7: stuck instances; 1-3: could not look"},
			flags: fJSON, run: cmdSagasStuck},
		{path: "sagas calls", args: "[OLDER]", maxArgs: 1,
			short: "list calls in doubt: saga.Call intents without an outcome whose step never committed",
			long: `Runs saga.Dispatcher.CallsInDoubt: the calls a handler made with saga.Call
whose intent is recorded, whose outcome is not, and whose step has not
committed — a process died mid-call, or the call failed leaving its outcome
unknown and the message is still being retried or was dead-lettered
(CallInDoubt). Settle each with the provider by its key. OLDER (default 1m)
leaves out calls in flight now. It reads every record of a call.

It exits 7 when it lists any and 0 when there is none, as sagas stuck does.`,
			examples: []string{"jetsaga sagas calls", "jetsaga sagas calls 1h --json"},
			flags:    fJSON, run: cmdSagasCalls},
		{path: "sagas diagram", args: "SAGA", minArgs: 1, maxArgs: 1,
			short: "print a saga's diagram, as Mermaid text or SVG, from the catalog its dispatchers publish",
			long: `Needs no saga definition: every dispatcher publishes, as it starts, a catalog
entry for each saga it runs in its queue's state (saga.CatalogEntry): the
saga's data version, its diagram (a state machine's states and transitions,
or a plain saga's messages, timeouts and completion) as Mermaid text, and its
states and transitions as data. The command reads the entry from every queue
(or --queue's) and prints the newest version's. --format svg draws it as a
self-contained SVG (no script, nothing fetched; open it in a browser). With
--json it prints the entry, and the SVG in "svg" with --format svg. A saga that no dispatcher
published (none started since it was registered, or one of a release without
the catalog) exits 3.`,
			examples: []string{"jetsaga sagas diagram order", "jetsaga sagas diagram order --format svg >order.svg",
				"jetsaga sagas diagram order --json | jq -r '.graph.states[]'"},
			flags: fJSON | fFormat | fQueue, run: cmdSagasDiagram},
		{path: "timeouts list", maxArgs: 0,
			short: "list pending timeouts by saga type or instance, across engines",
			long: `The transport engine's timeouts are found by browsing the scheduled messages
of --queue (every queue by default), then the messages it activated early and
a dispatcher holds until their due time (STATE activating; on JetStream the
engine activates a timeout up to its lead, 300 ms by default, early), read
from the last seconds of each queue, never its backlog; timeouts on Temporal
are listed when --temporal-address is given to a build with the Temporal engine.`,
			examples: []string{"jetsaga timeouts list", "jetsaga timeouts list --saga twofactor", "jetsaga timeouts list --saga twofactor --id l1 --json"},
			flags:    fJSON | fTimeouts, run: cmdTimeoutsList},
		{path: "timeouts replan", args: "SAGA CALENDAR-FILE NAME@VERSION", minArgs: 3, maxArgs: 3,
			short: "re-plan a saga type's pending calendar timeouts under a new calendar version",
			long: `Reads the calendar NAME at VERSION from CALENDAR-FILE (the calendar file
format of the calendar package, calendar.Load; a calendar built in code is
written as one with calendar.Standard.WriteTo), and runs
saga.Dispatcher.ReplanTimeouts: every pending timeout of SAGA requested by a
rule on calendar NAME at another version is computed again from its rule and
the instant it counted from, each instance as a step on it (it never races
the application's steps). The outcome of each timeout is definite: moved
(cancelled on its engine and scheduled again for its new due time, same
handle), unchanged (same due time; its record names the new version), or
failed with the reason, keeping its due time (exit 6). A timeout moved to a
due time already past fires at once: its row says how long ago it was due
(--json: "overdue", a Go duration), and its type's catch-up policy decides
when it arrives (skipped beyond the tolerance under saga.CatchUpSkip, to the
late handler under saga.HandleLate); this command does not run the saga and
cannot tell which (saga.Dispatcher.ReplanTimeouts in the application can). Deploy the new
version as the application's current one (saga.WithCalendars) first, so
that new requests use it too. --queue is the application dispatcher's
queue; by default the one the listed timeouts name.`,
			examples: []string{"jetsaga timeouts replan renewal bank-2026.cal bank@2026.2 --yes",
				"jetsaga timeouts replan renewal bank-2026.cal bank@2026.2 --queue billing --json --yes"},
			flags: fJSON | fYes | fQueue, run: cmdTimeoutsReplan},
		{path: "timeouts migrate", maxArgs: 0,
			short: "move a saga type's pending timeouts to another engine, one by one",
			long: `Runs saga.Dispatcher.MigrateTimeouts after a routing change: every pending
timeout of --saga not on engine --to (queue: JetStream; temporal: Temporal,
in the Temporal build with --temporal-address) is moved there, each as a step
on its instance (it never races the application's steps): scheduled on --to
at the same due time under a new ID, committed in the record, cancelled on
its old engine. Each outcome is definite: moved; fired (before it could be
moved: handled as usual); cancelled (the instance no longer waits for it);
or failed with the reason, left where it was (exit 6). A timeout is never
delivered twice, and a migration interrupted at any point loses nothing:
run it again to finish. --queue is the application dispatcher's queue; by
default the one the listed timeouts name.`,
			examples: []string{"jetsaga --temporal-address temporal:7233 timeouts migrate --saga loanoffer --to temporal --yes",
				"jetsaga --temporal-address temporal:7233 timeouts migrate --saga loanoffer --to queue --from temporal --json --yes"},
			flags: fJSON | fYes | fMigrate | fQueue, run: cmdTimeoutsMigrate},
		{path: "timeouts drain", maxArgs: 0,
			short: "report what an engine still holds of a saga type's timeouts",
			long: `Runs saga.Dispatcher.DrainReport: the timeouts of --saga on --engine that
instances wait for (by type, and each), and stale copies no instance waits
for (moved or cancelled, their cancel on the engine not yet carried out, or
not yet gone from Temporal's visibility store; they are dropped if they
fire). The engine is drained when nothing is pending; remove it from the
application's timeout.Router once nothing is stale either.`,
			examples: []string{"jetsaga timeouts drain --saga loanoffer --engine queue",
				"jetsaga --temporal-address temporal:7233 timeouts drain --saga loanoffer --engine temporal --json"},
			flags: fJSON | fMigrate | fQueue, run: cmdTimeoutsDrain},
		{path: "console", maxArgs: 0,
			short: "serve the web console",
			long: `Serves a small web console: queues with counts, messages (active, scheduled,
dead-lettered), saga instances and their timeouts, a lateness histogram. It
listens on 127.0.0.1 unless --listen says otherwise (any other address needs
--token). Actions (cancel a scheduled message, resubmit a dead letter) only
with --allow-actions, protected by a per-session CSRF token and same-origin
checks.`,
			examples: []string{"jetsaga console", "jetsaga console --allow-actions --token s3cret", "jetsaga console --listen 0.0.0.0:8470 --token s3cret"},
			flags:    fConsole, run: cmdConsole},
		{path: "housekeep", args: "[QUEUE...]", minArgs: 0, maxArgs: -1,
			short: "look after queues until interrupted, for services that are not jetsaga's",
			long: `Every jetsaga service that has a queue open looks after it: it moves a
message that exhausted MaxDeliveryCount to the dead-letter queue with
reason MaxDeliveryCountExceeded, and purges the schedule stream's copies
the queue has sourced. A queue whose services are all written in other
languages (docs/wire.md) needs one such process: this command is it. It
looks after the queues named, or every queue, including queues created
while it runs, until it is interrupted. Any number may run at once, with
services or not: for each queue partition, one process across all of them
holds the housekeeping lease and does the looks, and another takes over
when it stops or dies (docs/operating.md). A
queue named that does not exist is created, with the default settings
(one partition, no sessions), as transport.Broker.Queue does.`,
			examples: []string{"jetsaga housekeep", "jetsaga housekeep orders payments"},
			run:      cmdHousekeep},
	}
}

// out prints v as JSON with --json, else runs table.
func (c *call) out(v any, table func(w *tabwriter.Writer)) error {
	if c.o.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// fmtTime shows an instant in UTC with milliseconds and relative to now.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t)
	switch a := max(d, -d); {
	case a >= time.Minute:
		d = d.Round(time.Second)
	case a >= time.Second:
		d = d.Round(10 * time.Millisecond)
	default:
		d = d.Round(time.Millisecond)
	}
	rel := "in " + d.String()
	if d < 0 {
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + rel + ")"
}

// parseSeq reads a sequence number: decimal, or PARTITION:LOCAL for an
// active one and PARTITION:sLOCAL for a scheduled one.
func parseSeq(s string) (uint64, error) {
	if p, local, ok := strings.Cut(s, ":"); ok {
		pn, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%w: sequence number %q: bad partition", ErrUsage, s)
		}
		sched := strings.HasPrefix(local, "s")
		n, err := strconv.ParseUint(strings.TrimPrefix(local, "s"), 10, 64)
		if err != nil || n >= transport.ScheduledBit {
			return 0, fmt.Errorf("%w: sequence number %q: bad local part", ErrUsage, s)
		}
		seq := pn<<transport.PartitionShift | n
		if sched {
			seq |= transport.ScheduledBit
		}
		return seq, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: sequence number %q: decimal, PARTITION:LOCAL or PARTITION:sLOCAL", ErrUsage, s)
	}
	return n, nil
}

func parseSeqs(args []string) ([]uint64, error) {
	var out []uint64
	for _, a := range args {
		s, err := parseSeq(a)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// parseWhen reads RFC 3339, or a duration meaning that long ago.
func parseWhen(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: --%s %q: RFC 3339 time or a duration ago (90m)", ErrUsage, flagName, s)
}

func (c *call) filter() (browseFilter, error) {
	f := browseFilter{state: c.o.state, reason: c.o.reason, typ: c.o.typ}
	switch f.state {
	case "", "all", "active", "scheduled":
	default:
		return f, fmt.Errorf("%w: --state %q: active, scheduled or all", ErrUsage, f.state)
	}
	var err error
	if f.since, err = parseWhen("since", c.o.since); err != nil {
		return f, err
	}
	f.until, err = parseWhen("until", c.o.until)
	return f, err
}

func cmdQueuesList(c *call) error {
	qs, err := c.env.listQueues(c.ctx)
	if err != nil {
		return err
	}
	return c.out(qs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "QUEUE\tPARTITIONS\tACTIVE\tSCHEDULED\tDEAD-LETTERED")
		for _, q := range qs {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", q.Name, q.Partitions, q.Active, q.Scheduled, q.DeadLettered)
		}
	})
}

func cmdQueuesShow(c *call) error {
	q, err := c.env.queue(c.ctx, c.args[0])
	if err != nil {
		return err
	}
	from, err := parseSeq(c.o.from)
	if err != nil {
		return err
	}
	if c.o.max < 1 {
		return fmt.Errorf("%w: --max %d: must be at least 1", ErrUsage, c.o.max)
	}
	v, err := showQueue(c.ctx, q, from, c.o.max)
	if err != nil {
		return err
	}
	return c.out(v, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "QUEUE\tPARTITIONS\tACTIVE\tSCHEDULED\tDEAD-LETTERED")
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", v.Queue, v.Partitions, v.Active, v.Scheduled, v.DeadLettered)
		w.Flush()
		all := "all of them"
		if !v.Complete {
			all = "not all: raise --max"
		}
		fmt.Fprintf(c.stdout, "\nread %d of the queue's messages (%s): %d distinct keys, %d without a key\n", v.Read, all, v.Keys, v.WithoutKey)
		if len(v.TopKeys) > 0 {
			fmt.Fprintln(w, "KEY\tACTIVE\tSCHEDULED\tTOTAL")
			for _, k := range v.TopKeys {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", k.Key, k.Active, k.Scheduled, k.Active+k.Scheduled)
			}
			w.Flush()
		}
		fmt.Fprintf(c.stdout, "\n%d dispatchers running on the queue\n", len(v.Dispatchers))
		if len(v.Dispatchers) > 0 {
			fmt.Fprintln(w, "HOST\tPID\tSTARTED\tSTATE")
			for _, h := range v.Dispatchers {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", h.Host, h.PID, h.Started.Format(time.RFC3339), healthLine(h))
			}
		}
	})
}

// BrowsePage is a page of browsed messages.
type BrowsePage struct {
	Queue    string        `json:"queue"`
	Messages []MessageView `json:"messages"`
	// Next is the --from of the next page; 0 at the end.
	Next uint64 `json:"next,omitempty"`
}

// browse browses the queue, subscription or dead-letter queue the
// argument names.
func (c *call) browse(queueArgument string) (BrowsePage, error) {
	x, err := c.env.entity(c.ctx, queueArgument)
	if err != nil {
		return BrowsePage{}, err
	}
	b, name := x.browsed()
	return c.browseOf(b, name, x.dead)
}

// browseOf browses b by the browse flags.
func (c *call) browseOf(b browsable, name string, dead bool) (BrowsePage, error) {
	from, err := parseSeq(c.o.from)
	if err != nil {
		return BrowsePage{}, err
	}
	if c.o.max < 1 {
		return BrowsePage{}, fmt.Errorf("%w: --max must be at least 1", ErrUsage)
	}
	f, err := c.filter()
	if err != nil {
		return BrowsePage{}, err
	}
	ms, next, err := browse(c.ctx, b, name, from, c.o.max, f, dead, c.o.body)
	return BrowsePage{Queue: name, Messages: ms, Next: next}, err
}

func cmdQueuesBrowse(c *call) error {
	page, err := c.browse(c.args[0])
	if err != nil {
		return err
	}
	return c.outPage(page)
}

// outPage prints a page of browsed messages.
func (c *call) outPage(page BrowsePage) error {
	return c.out(page, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SEQ\tPART:LOCAL\tSTATE\tENQUEUED\tSCHEDULED\tTYPE\tMESSAGE-ID\tPROPERTIES")
		for _, m := range page.Messages {
			sched := "-"
			if m.ScheduledAt != nil {
				sched = fmtTime(*m.ScheduledAt)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Seq, transport.FormatSeq(m.Seq), m.State, fmtTime(m.EnqueuedAt), sched,
				dash(m.Type), dash(m.MessageID), fmtProps(m.Properties))
		}
		w.Flush()
		if page.Next != 0 {
			fmt.Fprintf(c.stdout, "more: --from %d\n", page.Next)
		}
		if len(page.Messages) == 0 {
			fmt.Fprintf(c.stdout, "no messages\n")
		}
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtProps(p map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if k == saga.TypeProperty {
			continue
		}
		parts = append(parts, k+"="+p[k])
	}
	return dash(strings.Join(parts, " "))
}

func cmdQueuesPeek(c *call) error {
	if len(c.args) == 2 {
		c.o.from = c.args[1]
	}
	page, err := c.browse(c.args[0])
	if err != nil {
		return err
	}
	return c.outPeek(page)
}

// outPeek prints the messages of a page in full.
func (c *call) outPeek(page BrowsePage) error {
	if len(page.Messages) == 0 {
		return fmt.Errorf("%w: no message at or after %s in %s", ErrNotFound, c.o.from, page.Queue)
	}
	return c.out(page, func(w *tabwriter.Writer) {
		for i, m := range page.Messages {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeMessage(w, m)
		}
	})
}

func writeMessage(w io.Writer, m MessageView) {
	fmt.Fprintf(w, "seq\t%d (%s)\n", m.Seq, transport.FormatSeq(m.Seq))
	fmt.Fprintf(w, "state\t%s\n", m.State)
	fmt.Fprintf(w, "enqueued\t%s\n", fmtTime(m.EnqueuedAt))
	if m.ScheduledAt != nil {
		fmt.Fprintf(w, "scheduled\t%s\n", fmtTime(*m.ScheduledAt))
	}
	for _, f := range [][2]string{{"type", m.Type}, {"message-id", m.MessageID}, {"correlation-id", m.Correlation},
		{"session-id", m.SessionID}, {"reply-to", m.ReplyTo}, {"subject", m.Subject}, {"content-type", m.ContentType},
		{"dead-letter reason", m.DeadLetterReason}, {"dead-letter description", m.DeadLetterDescription},
		{"dead-letter source", m.DeadLetterSource}} {
		if f[1] != "" {
			fmt.Fprintf(w, "%s\t%s\n", f[0], f[1])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Properties)) {
		fmt.Fprintf(w, "property %s\t%s\n", k, m.Properties[k])
	}
	fmt.Fprintf(w, "size\t%d bytes\n", m.Size)
	if m.Body != nil {
		fmt.Fprintf(w, "body\t%s\n", *m.Body)
	} else if m.BodyBase64 != nil {
		fmt.Fprintf(w, "body (base64)\t%x\n", m.BodyBase64)
	}
}

func cmdScheduledCancel(c *call) error {
	q, err := c.env.queue(c.ctx, c.args[0])
	if err != nil {
		return err
	}
	return c.cancel(q, q.Name())
}

// cancel cancels the scheduled messages the arguments after the first
// name on q, a queue or a topic.
func (c *call) cancel(q canceller, name string) error {
	seqs, err := parseSeqs(c.args[1:])
	if err != nil {
		return err
	}
	if err := c.confirm(fmt.Sprintf("cancel %d scheduled message(s) on %s", len(seqs), name)); err != nil {
		return err
	}
	var outs []CancelOutcome
	var first error
	for _, s := range seqs {
		o := cancelScheduled(c.ctx, q, s)
		outs = append(outs, o)
		if o.err != nil && first == nil {
			first = o.err
		}
	}
	if err := c.out(outs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SEQ\tPART:LOCAL\tOUTCOME")
		for _, o := range outs {
			fmt.Fprintf(w, "%d\t%s\t%s\n", o.Seq, transport.FormatSeq(o.Seq), o.Outcome)
		}
	}); err != nil {
		return err
	}
	return first
}

func cmdDLQList(c *call) error {
	c.args[0] += transport.DeadLetterSuffix
	page, err := c.browse(c.args[0])
	if err != nil {
		return err
	}
	return c.out(page, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SEQ\tDEAD-LETTERED\tREASON\tTYPE\tMESSAGE-ID\tDESCRIPTION")
		for _, m := range page.Messages {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", m.Seq, fmtTime(m.EnqueuedAt), dash(m.DeadLetterReason), dash(m.Type),
				dash(m.MessageID), dash(truncate(m.DeadLetterDescription, 120)))
		}
		w.Flush()
		if page.Next != 0 {
			fmt.Fprintf(c.stdout, "more: --from %d\n", page.Next)
		}
		if len(page.Messages) == 0 {
			fmt.Fprintf(c.stdout, "no dead letters\n")
		}
	})
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (c *call) deadFilter() (deadFilter, error) {
	bf, err := c.filter()
	if err != nil {
		return deadFilter{}, err
	}
	seqs, err := parseSeqs(c.args[1:])
	if err != nil {
		return deadFilter{}, err
	}
	f := deadFilter{seqs: seqs, browseFilter: bf, all: c.o.all}
	if f.empty() {
		return f, fmt.Errorf("%w: select dead letters: SEQ..., --reason, --type, --since, --until or --all", ErrUsage)
	}
	return f, nil
}

func (c *call) deadOutcomes(outs []DeadLetterOutcome, done string) error {
	if err := c.out(outs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "SEQ\tMESSAGE-ID\tOUTCOME\tNOTE")
		for _, o := range outs {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", o.Seq, dash(o.SentAs), o.Outcome, dash(o.Error))
		}
		if len(outs) == 0 {
			fmt.Fprintln(w, "no dead letter selected")
		}
	}); err != nil {
		return err
	}
	left := 0
	notFound := 0
	for _, o := range outs {
		switch o.Outcome {
		case done:
		case "not-found":
			notFound++
		default:
			left++
		}
	}
	switch {
	case left > 0:
		return fmt.Errorf("%w: %d of %d dead letters not %s", ErrPartial, left+notFound, len(outs), done)
	case notFound > 0 && notFound == len(outs):
		return fmt.Errorf("%w: no such dead letter", ErrNotFound)
	case notFound > 0:
		return fmt.Errorf("%w: %d of %d dead letters not found", ErrPartial, notFound, len(outs))
	}
	return nil
}

func cmdDLQResubmit(c *call) error {
	x, err := c.env.entity(c.ctx, c.args[0])
	if err != nil {
		return err
	}
	dst, err := c.destination(x)
	if err != nil {
		return err
	}
	f, err := c.deadFilter()
	if err != nil {
		return err
	}
	if err := c.confirm("resubmit the selected dead letters of " + x.path + " to " + dst.name); err != nil {
		return err
	}
	outs, err := resubmit(c.ctx, x, dst, f, c.o.newID, c.o.idle)
	if err != nil {
		return err
	}
	return c.deadOutcomes(outs, "resubmitted")
}

// destination is where dlq resubmit sends the dead letters of x: --to,
// --to-topic, or the queue they came from. A subscription's dead letters
// need --to or --to-topic: no queue feeds that one subscription only.
func (c *call) destination(x entity) (destination, error) {
	switch {
	case c.o.to != "" && c.o.toTopic != "":
		return destination{}, fmt.Errorf("%w: --to and --to-topic exclude each other", ErrUsage)
	case c.o.to != "":
		q, err := c.env.queue(c.ctx, c.o.to)
		if err != nil {
			return destination{}, err
		}
		return queueDestination(q), nil
	case c.o.toTopic != "":
		t, err := c.env.topic(c.ctx, c.o.toTopic)
		if err != nil {
			return destination{}, err
		}
		return destination{s: t, name: "topic " + t.Name(), window: t.Config().DuplicateWindow}, nil
	case x.sub != nil:
		hint := ""
		if q, ok := c.env.endpointQueue(c.ctx, x.sub.Name()); ok {
			hint = fmt.Sprintf(" (%s is the subscription of saga endpoint %q: --to %s)", x.path, q, q)
		}
		return destination{}, fmt.Errorf("%w: a subscription's dead letters go back with --to QUEUE, to a queue whose "+
			"receiver handles them%s, or with --to-topic %s, to every subscription whose filter passes them",
			ErrUsage, hint, x.sub.Topic().Name())
	}
	return queueDestination(x.q), nil
}

func cmdDLQPurge(c *call) error {
	x, err := c.env.entity(c.ctx, c.args[0])
	if err != nil {
		return err
	}
	f, err := c.deadFilter()
	if err != nil {
		return err
	}
	if err := c.confirm("purge the selected dead letters of " + x.path + " for good"); err != nil {
		return err
	}
	if f.all && len(f.seqs) == 0 && f.reason == "" && f.typ == "" && f.since.IsZero() && f.until.IsZero() {
		// --all without other filters: one stream purge.
		n, err := c.env.purgeAllDead(c.ctx, x)
		if err != nil {
			return err
		}
		res := struct {
			Queue  string `json:"queue"`
			Purged uint64 `json:"purged"`
		}{x.path, n}
		return c.out(res, func(w *tabwriter.Writer) { fmt.Fprintf(w, "purged %d dead letters of %s\n", n, x.path) })
	}
	outs, err := purgeDead(c.ctx, x, f, c.o.idle)
	if err != nil {
		return err
	}
	return c.deadOutcomes(outs, "purged")
}

func cmdSagasList(c *call) error {
	if len(c.args) == 0 {
		ts, err := c.env.sagaTypes(c.ctx)
		if err != nil {
			return err
		}
		return c.out(ts, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "SAGA\tINSTANCES")
			for _, t := range ts {
				fmt.Fprintf(w, "%s\t%d\n", t.Saga, t.Instances)
			}
		})
	}
	if c.o.limit < 1 {
		return fmt.Errorf("%w: --limit must be at least 1", ErrUsage)
	}
	page, err := c.env.instances(c.ctx, c.args[0], c.o.after, c.o.limit)
	if err != nil {
		return err
	}
	return c.out(page, func(w *tabwriter.Writer) {
		writeInstances(w, page.Instances)
		w.Flush()
		fmt.Fprintf(c.stdout, "%d of %d instances", len(page.Instances), page.Total)
		if page.Next != "" {
			fmt.Fprintf(c.stdout, "; next page: --after %s", page.Next)
		}
		fmt.Fprintln(c.stdout)
	})
}

func cmdSagasFind(c *call) error {
	name, value, ok := strings.Cut(c.args[1], "=")
	if !ok {
		return fmt.Errorf("%w: %q: want NAME=VALUE", ErrUsage, c.args[1])
	}
	if c.o.limit < 1 {
		return fmt.Errorf("%w: --limit must be at least 1", ErrUsage)
	}
	page, err := c.env.find(c.ctx, c.args[0], name, value, c.o.after, c.o.limit)
	if err != nil {
		return err
	}
	return c.out(page, func(w *tabwriter.Writer) {
		writeInstances(w, page.Instances)
		w.Flush()
		fmt.Fprintf(c.stdout, "%d instances with %s=%q", len(page.Instances), name, value)
		if page.Next != "" {
			fmt.Fprintf(c.stdout, "; next page: --after %s", page.Next)
		}
		if page.Building {
			fmt.Fprint(c.stdout, "; the index is being built: instances written before it may be missing")
		}
		fmt.Fprintln(c.stdout)
	})
}

// writeInstances writes a table of instances, one a line.
func writeInstances(w *tabwriter.Writer, vs []InstanceView) {
	fmt.Fprintln(w, "ID\tSTATE\tSTARTED\tUPDATED\tTIMEOUTS\tNEXT DUE")
	for _, v := range vs {
		state, next := "running", "-"
		if v.Completed {
			state = "completed"
		}
		if len(v.Timeouts) > 0 {
			next = fmtTime(v.Timeouts[0].At)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", printable(v.ID), state, fmtTime(v.Started), fmtTime(v.Updated), len(v.Timeouts), next)
	}
}

// ReindexRequest is what sagas reindex sent.
type ReindexRequest struct {
	Saga      string `json:"saga"`
	Queue     string `json:"queue"`
	MessageID string `json:"message_id"` // the request message's
}

func cmdSagasReindex(c *call) error {
	name := c.args[0]
	if err := transport.ValidateQueueName(name); err != nil {
		return fmt.Errorf("%w: saga type %q: 1-64 characters of [A-Za-z0-9_-]", ErrUsage, name)
	}
	if c.o.queue == "" {
		return fmt.Errorf("%w: --queue is required: the queue of the dispatchers that run %s", ErrUsage, name)
	}
	q, err := c.env.queue(c.ctx, c.o.queue)
	if err != nil {
		return err
	}
	id, err := saga.RequestReindex(c.ctx, q, name)
	if err != nil {
		return err
	}
	r := ReindexRequest{Saga: name, Queue: c.o.queue, MessageID: id}
	return c.out(r, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "asked the dispatchers of queue %s to rebuild the indexes of saga %s (message %s); sagas find says when it is done\n",
			r.Queue, r.Saga, r.MessageID)
	})
}

func cmdSagasShow(c *call) error {
	v, err := c.env.instance(c.ctx, c.args[0], c.args[1])
	if err != nil {
		return err
	}
	return c.out(v, func(w *tabwriter.Writer) { writeInstance(w, v) })
}

func writeInstance(w *tabwriter.Writer, v InstanceView) {
	state := "running"
	if v.Completed {
		state = "completed (tombstone)"
	}
	fmt.Fprintf(w, "saga\t%s\nid\t%s\nstate\t%s\nstarted\t%s\nupdated\t%s\nrevision\t%d\ninbox\t%d message identities\n",
		v.Saga, v.ID, state, fmtTime(v.Started), fmtTime(v.Updated), v.Revision, v.InboxSize)
	if v.OutboxSize > 0 {
		fmt.Fprintf(w, "outbox\t%d effects pending\n", v.OutboxSize)
	}
	if e := v.expectsText(); e != "" {
		fmt.Fprintf(w, "expects\t%s\n", e)
	}
	w.Flush()
	switch {
	case len(v.Data) > 0:
		var buf strings.Builder
		if err := jsonIndent(&buf, v.Data); err == nil {
			fmt.Fprintf(w, "data:\n%s\n", buf.String())
		}
	case len(v.DataBase64) > 0:
		fmt.Fprintf(w, "data (not JSON, %d bytes)\n", len(v.DataBase64))
	}
	fmt.Fprintf(w, "pending timeouts: %d\n", len(v.Timeouts))
	if len(v.Timeouts) > 0 {
		fmt.Fprintln(w, "  DUE\tTYPE\tENGINE\tQUEUE\tSEQ\tHANDLE\tRULE")
		for _, t := range v.Timeouts {
			seq := "-"
			if t.Seq != 0 {
				seq = transport.FormatSeq(t.Seq)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(t.At), t.Type, dash(t.Engine), dash(t.Queue), seq, t.Handle, fmtRule(t.Rule, t.Calendar, t.From))
		}
	}
}

func jsonIndent(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdSagasCancel(c *call) error {
	if err := c.confirm(fmt.Sprintf("cancel every pending timeout of saga %s instance %q", c.args[0], c.args[1])); err != nil {
		return err
	}
	res, err := c.env.cancelSagaTimeouts(c.ctx, c.args[0], c.args[1], c.o.queue)
	pendingEffects := errors.Is(err, saga.ErrEffectsPending)
	if err != nil && !pendingEffects {
		return err
	}
	out := struct {
		Saga      string                `json:"saga"`
		ID        string                `json:"id"`
		Cancelled []saga.PendingTimeout `json:"cancelled"`
		Pending   string                `json:"engine_cancel_pending,omitempty"`
	}{res.Saga, res.ID, res.Cancelled, ""}
	if out.Cancelled == nil {
		out.Cancelled = []saga.PendingTimeout{}
	}
	if pendingEffects {
		out.Pending = err.Error()
	}
	if perr := c.out(out, func(w *tabwriter.Writer) {
		if len(res.Cancelled) == 0 {
			fmt.Fprintf(w, "saga %s/%s has no pending timeout: nothing cancelled\n", res.Saga, res.ID)
			return
		}
		fmt.Fprintf(w, "cancelled %d timeout(s) of %s/%s:\n", len(res.Cancelled), res.Saga, res.ID)
		fmt.Fprintln(w, "  DUE\tTYPE\tHANDLE")
		for _, t := range res.Cancelled {
			fmt.Fprintf(w, "  %s\t%s\t%s\n", fmtTime(t.At), t.Type, t.Handle)
		}
		if pendingEffects {
			fmt.Fprintf(w, "the saga no longer waits for them; cancelling them on their engine is left to the application's dispatcher:\n  %v\n", err)
		}
	}); perr != nil {
		return perr
	}
	return nil
}

func cmdTimeoutsList(c *call) error {
	if c.o.id != "" && c.o.saga == "" {
		return fmt.Errorf("%w: --id needs --saga", ErrUsage)
	}
	ps, err := c.env.pendingTimeouts(c.ctx, c.o.queue, c.o.saga, c.o.id)
	if ps == nil {
		ps = []PendingView{}
	}
	if perr := c.out(ps, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "DUE\tSTATE\tENGINE\tSAGA\tID\tTYPE\tQUEUE\tSEQ\tRULE")
		for _, p := range ps {
			seq := "-"
			if p.Seq != 0 {
				seq = transport.FormatSeq(p.Seq)
			}
			state := "scheduled"
			if p.Activating {
				state = "activating"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(p.At), state, p.Engine, dash(p.Saga), dash(p.ID), dash(p.Type), dash(p.Queue), seq,
				fmtRule(p.Rule, p.Calendar, time.Time{}))
		}
		if len(ps) == 0 {
			fmt.Fprintln(w, "no pending timeouts")
		}
	}); perr != nil {
		return perr
	}
	return err
}

// fmtRule shows a timeout's calendar rule: "3 business days after, at
// 09:00 Europe/Warsaw (bank@2026.2, from 2026-03-02T10:00:00Z)", or "-".
func fmtRule(rule, cal string, from time.Time) string {
	if rule == "" {
		return "-"
	}
	var extra []string
	if cal != "" {
		extra = append(extra, cal)
	}
	if !from.IsZero() {
		extra = append(extra, "from "+fmtTime(from))
	}
	if len(extra) == 0 {
		return rule
	}
	return rule + " (" + strings.Join(extra, ", ") + ")"
}

func cmdTimeoutsReplan(c *call) error {
	name, version, ok := strings.Cut(c.args[2], "@")
	if !ok || name == "" || version == "" {
		return fmt.Errorf("%w: calendar %q: want NAME@VERSION", ErrUsage, c.args[2])
	}
	ref := calendar.Ref{Name: name, Version: version}
	if err := c.confirm(fmt.Sprintf("re-plan the pending timeouts of saga %s on calendar %s under %s", c.args[0], name, ref)); err != nil {
		return err
	}
	res, err := c.env.replanTimeouts(c.ctx, c.args[0], c.args[1], ref, c.o.queue)
	if err != nil && res == nil {
		return err
	}
	rows := []ReplanView{}
	failed := 0
	for _, r := range res {
		rw := ReplanView{Saga: r.Saga, ID: r.ID, Handle: string(r.Handle), Type: r.Type, Rule: r.Rule, From: r.From,
			Old: r.Old.String(), OldAt: r.OldAt, NewAt: r.NewAt, Outcome: "unchanged"}
		switch {
		case r.Err != nil:
			rw.Outcome, rw.Error = "failed", r.Err.Error()
			failed++
		case r.Changed():
			rw.Outcome = "moved"
			if r.Overdue > 0 {
				rw.Overdue = r.Overdue.String()
			}
		}
		if r.Err == nil {
			rw.New = r.New.String()
		}
		rows = append(rows, rw)
	}
	if perr := c.out(rows, func(w *tabwriter.Writer) {
		if len(rows) == 0 {
			fmt.Fprintf(w, "no pending timeout of saga %s on calendar %s at another version: nothing to re-plan\n", c.args[0], name)
			return
		}
		fmt.Fprintln(w, "ID\tTYPE\tOUTCOME\tOLD DUE\tNEW DUE\tRULE")
		for _, r := range rows {
			newDue := "-"
			if !r.NewAt.IsZero() {
				newDue = fmtTime(r.NewAt)
			}
			outcome := r.Outcome
			if r.Error != "" {
				outcome += ": " + r.Error
			}
			if r.Overdue != "" {
				// This command does not run the saga: the type's catch-up
				// policy, unknown here, decides when the timeout arrives.
				outcome += " (due " + r.Overdue + " ago: fires at once; its type's catch-up policy applies)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Type, outcome, fmtTime(r.OldAt), newDue, fmtRule(r.Rule, r.Old+" -> "+cmp.Or(r.New, "-"), r.From))
		}
	}); perr != nil {
		return perr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPartial, err)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d timeouts could not be re-planned and keep their due times", ErrPartial, failed, len(rows))
	}
	return nil
}
