// Package schedule runs recurring schedules in business time: named
// objects that send a message to a queue (or a topic) at every occurrence
// of a spec — "every second business day at 09:00 Warsaw time", "the last
// business day of the month at 18:00", "every 15 minutes within business
// hours", a cron expression in a zone, or a fixed interval.
//
// # Schedules
//
// A Schedule has a Name (1-64 characters of [A-Za-z0-9_-]), a Spec, an
// Action and policies. A Scheduler keeps schedules on a queue of a
// transport broker (DefaultQueue unless WithQueue), as state records
// (transport.Queue.CommitState), and Scheduler.Run sends their occurrences.
// Create, Get, List, Pause, Resume, Trigger, Backfill, Delete and Replan
// manage them; the jetsaga command's "schedules" commands call them.
//
// Each occurrence's message is a copy of the action's message with its
// MessageID set to the occurrence ID (OccurrenceID: the schedule's name and
// the nominal time, "nightly@20270105T090000Z") and the properties
// PropertySchedule, PropertyNominal (the nominal time, RFC 3339) and
// PropertyCause. The target queue drops a message whose MessageID it
// remembers (its DuplicateWindow), so an occurrence sent again after a crash
// is dropped, and a consumer can tell occurrences apart by ID.
//
// # How occurrences are sent
//
// The pending occurrence of a schedule is one message scheduled on the
// scheduler's queue for its time (nominal plus jitter), and the record names
// it: the two are written in one atomic write, or, on a queue where such a
// write is slow (transport.Queue.StateCommitsStaged), the message first and
// the record after it, so that the record never names a message that was
// not written. When it activates, a Run
// receives it, sends the occurrence (and any later ones already due, as the
// catch-up policy says) to the target, and writes the record with the next
// occurrence's message, again in one write: a schedule never has more than
// one pending occurrence, and none is skipped silently — each is sent,
// or counted as skipped by a pause or the catch-up policy (Info.Skipped).
// A Run that dies between sending and writing leaves the message to be
// redelivered; the occurrence is sent again and dropped by the target as a
// duplicate. A Run killed while it holds the pending occurrence's message
// stalls the schedule until the message's lock expires (MaxLockDuration
// plus the broker's grace, about 12 s on nats-server, whatever other Runs
// are up); the catch-up policy then applies to the occurrences due
// meanwhile, so that CatchUpSkip skips a dozen of a schedule every second. Several Runs (in several processes) share the work; while none
// runs, the pending occurrence waits on the queue, and the next Run applies
// the catch-up policy to everything due by then.
//
// With WithTimeouts the pending occurrence waits on a timeout engine
// instead (the Temporal engine, or a timeout.Router that sends long gaps
// there): the tick is a timeout that the engine delivers to the
// scheduler's queue 1.3 s before the occurrence, scheduled before the
// record is written (the two cannot be one write); everything else is
// the same. Info.Engine tells where a schedule's tick waits.
//
// An occurrence that cannot be sent (a topic not created yet, a calendar
// version missing from the registry given WithCalendars, which every
// process that runs Run needs) is tried again every 10 seconds; it is never
// dead-lettered.
//
// An occurrence is never sent before its nominal time (by the clock of the
// process that sends it). On JetStream its message activates
// timeout.DefaultEarlyActivation early and Run holds it until its time, so
// it is sent within the time a Run takes to send it, unless the server's
// 250 ms scheduling tick is late by more than that lead.
//
// # Specs and time zones
//
// A cron Spec is read in its Zone; a Rule names its own zone; an Every
// interval is elapsed time. When the clocks go forward over a time a cron
// expression names (02:30 on the night Warsaw goes from 02:00 to 03:00),
// the occurrence is at the instant of the jump (03:00), once however many
// such times the expression names; when they go back over it (02:30 on the
// night Warsaw goes from 03:00 to 02:00), it fires once, at the first
// instant (02:30 summer time). Rules follow the calendar package: a time in
// a gap moves forward by the jump's length; a repeated time counts once, at
// its first instant, as it does for calendar.Next wherever it is used.
//
// A spec that is malformed, ambiguous (more than one of Cron, Rule and
// Every) or that never fires (February 30) is refused by Create with an
// error wrapping ErrInvalidSpec or ErrNeverFires.
//
// # Policies
//
//   - Catch-up (CatchUp): an occurrence sent more than Tolerance after its
//     time is late; CatchUpFire sends it anyway, CatchUpSkip skips it,
//     CatchUpCoalesce sends only the latest of a run of late ones, marked
//     with PropertyCoalesced.
//   - Start and End bound the nominal times.
//   - Jitter delays each occurrence by an amount fixed by its ID.
//   - Pause and Resume (with a note); occurrences that fall in a pause are
//     skipped, and Backfill sends them.
//   - Trigger sends an occurrence now; Backfill sends the occurrences of a
//     past range that the schedule did not send.
//   - Replan plans the pending occurrence again under a new version of the
//     spec's calendar.
//   - Overlap: the scheduler cannot know when the work an occurrence starts
//     is done, so it sends every occurrence; give the action's message a
//     SessionID (on a queue with sessions) to have them handled one at a
//     time, in order.
//
// # Errors
//
// Errors wrap ErrInvalidName, ErrInvalidSpec, ErrNeverFires,
// ErrInvalidSchedule, ErrExists, ErrNotFound or ErrInvalidOption, or come
// from the transport; match with errors.Is.
package schedule
