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
// the nominal time, "nightly@20270105T090000Z"; with "~2" appended when
// it was planned again after a cancel, see below) and the properties
// PropertySchedule, PropertyNominal (the nominal time, RFC 3339) and
// PropertyCause. The target queue drops a message whose MessageID it
// remembers (its DuplicateWindow), so an occurrence sent again after a crash
// is dropped, and a consumer can tell occurrences apart by ID.
//
// # How occurrences are sent
//
// Occurrences are planned ahead: each occurrence due within the horizon
// (DefaultHorizon, a minute, or WithHorizon; at most MaxPlanned of a
// schedule) is a message scheduled on the target queue or topic
// (transport.Queue.Schedule) for its time, nominal plus jitter, with its
// occurrence ID as MessageID, and the schedule's record (a state record
// on the scheduler's queue, transport.Queue.CommitState) names each by
// its scheduled sequence number. The server activates them on time: a
// Run is not needed at an occurrence's time, and one that dies delays
// nothing already planned. A record names its planned messages before
// they exist: a write names the occurrences it plans, then schedules
// their messages, then writes their numbers; should the writer die in
// between, a Run schedules them (the same IDs: the target reports one
// already scheduled and its number) before the first is due: the tick
// the dead Run held, delivered again, or a tick the first write carries.
//
// A Run's work is planning. Each record has one tick, a message
// scheduled on the scheduler's queue for when half of the horizon is
// left before its first occurrence not planned; a Run receives it,
// counts the planned occurrences that are due as sent, plans those that
// came within the horizon, and writes the record with the next tick, in
// one write (or, on a queue where such a write is slow,
// transport.Queue.StateCommitsStaged, the tick first). A Run killed
// while it holds a tick delays that planning until the tick's lock
// expires (MaxLockDuration plus the broker's grace, about 12 s on
// nats-server), which half a horizon (at least MinHorizon) outlasts.
// Several Runs (in several processes) share the work. While none runs,
// planned occurrences are still sent; the first Run after applies the
// catch-up policy to the occurrences that were due meanwhile and not
// planned, sends or skips them, and plans on.
//
// Pause, Delete and Replan cancel the planned messages first
// (transport.Queue.Cancel, whose answer is definite), then write the
// record: a message cancelled is never delivered; one that activated
// already (on JetStream, one due within 500 ms of the cancel) counts as
// sent. An outcome that is not definite (the server away) fails the
// call, which writes nothing and may be called again. Replan keeps the
// planned occurrences the new calendar version keeps. The target keeps a
// cancelled message's ID taken (transport.QueueConfig.CancelRecordTTL),
// so an occurrence planned again after its message was cancelled (a
// Resume before its time, a Replan, a schedule deleted and created again
// under the same name) goes out with "~2" (then "~3", …) appended to its
// MessageID; the record keeps the latest 256 such occurrences, and
// Backfill uses the same IDs. Past those, the target tells a cancelled
// ID from a sent one (transport.SendResult.Cancelled): a schedule
// created again under the name of a deleted one steps past the IDs the
// deleted one cancelled, and counts as sent an occurrence whose message
// the deleted one's plan delivered (it is not sent twice). A process
// that dies between cancelling and writing the record leaves a record
// naming cancelled messages, which the next Run counts as sent; call the
// operation again.
//
// Deleting the target queue (or topic) deletes the occurrences planned
// on it: they are never delivered, yet the record counts them as sent at
// their time. Pause the schedules of a queue before deleting it, and
// Resume them once it exists again.
//
// With WithTimeouts the ticks wait on a timeout engine instead (the
// Temporal engine, or a timeout.Router that sends long gaps there), due
// at their time: a tick only plans, half a horizon ahead of the first
// occurrence it plans, so the engine's lateness (a Temporal timer fires
// some 100 ms late, one under a second after a second) needs no lead.
// The tick is scheduled before the record is written (the two cannot be
// one write). Info.Engine tells where a schedule's tick waits.
//
// An occurrence that cannot be planned or sent (a topic not created
// yet, a calendar version missing from the registry given WithCalendars,
// which every process that runs Run needs) is tried again every 10
// seconds; it is never dead-lettered. Topics take scheduled messages as
// queues do (transport.Topic.Schedule): an occurrence enters the topic
// once, at its time.
//
// An occurrence is never sent before its nominal time: the server never
// activates a scheduled message early, and an occurrence that a Run sends
// itself (catch-up) is due by that Run's clock. On JetStream the server
// activates scheduled messages on a 250 ms tick, so an occurrence
// arrives up to that late, more when the server is loaded.
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
//     spec's calendar; the planned occurrences it moves are cancelled.
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
