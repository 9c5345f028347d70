// Package calendar computes due times the way a business states them: "three business days
// after, at 09:00 Europe/Warsaw", "seven days before renewal, but never on a weekend",
// "the last business day of the month at 17:00". It is the time arithmetic of saga timeouts
// in business time; it uses the standard library only and keeps no state of its own.
//
// # Calendars
//
// A [Calendar] says which days are business days, and has a name and a version. [New]
// builds one from a weekend and holidays: dated ([On]), yearly ([Yearly]), yearly and
// observed on the nearest weekday when on a weekend ([YearlyObserved]), the Nth weekday of a
// month ([NthWeekday]), relative to Easter ([Easter]), or read from a calendar file ([Load],
// which documents the format).
// Users may implement Calendar themselves, for instance over a table a back office keeps.
// A [Registry] finds a calendar by name and version ([Ref]).
//
// # Rules
//
// A [Rule] is a due time as data: it says how to move from a start instant to the day the
// rule falls due, at what wall-clock time, and whether to roll the result into business
// hours; or it counts hours of business hours ([BusinessHours]). [Rule.Due] computes the instant from a start and a calendar; it is computed once,
// when a timeout is requested, and costs about a microsecond with a loaded zone
// ([Rule.DueIn], [Zones]). A rule is read in its time zone, which it must name
// ([Rule.In]; "UTC" for UTC): a calendar has no zone, and a rule without one is an error
// wrapping [ErrInvalidRule] when computed, not UTC by default. The start's date there is
// the day the rule counts from, and the start's wall-clock time there is the result's,
// unless the rule gives one. Counts are exclusive of the start day:
// one business day after a Friday or a Saturday is the following Monday (if it is a
// business day), one business day before a Monday the Friday before. A month after January
// 31 is the last day of February. The result may lie before the start ("7 business days
// before renewal"); a timeout due in the past fires at once.
//
// Rules encode as JSON and decode strictly: an unknown field or an invalid rule is an error,
// so that a rule written by a newer version is refused rather than half understood.
// [Rule.String] shows a rule to people; its wording is stable.
//
// # Daylight saving time
//
// Rules name wall-clock times, and clocks change. A wall-clock time that does not exist on
// its day, because the clocks jumped forward over it, moves forward by the length of the
// jump: 02:30 on the day Warsaw goes from 02:00 to 03:00 is 03:30, and 02:15 on the day Lord
// Howe Island goes from 02:00 to 02:30 is 02:45. A wall-clock time that happens twice,
// because the clocks went back over it, is the earlier instant: 02:30 on the day Warsaw goes
// from 03:00 back to 02:00 is 02:30 summer time, and only that: the second 02:30 of the
// night counts for no rule. Keeping the start's wall-clock time follows the same rules. So
// [Next] asked at 02:45 summer time that night is due at 02:30 the next day, as a daily
// schedule fires, and a chain of daily rules, each counted from the due time of the one
// before, is due once a day through every change of the clocks. A rule that counts
// elapsed time ([BusinessHours]) is not read on the wall clock: the hour the clocks
// repeat counts, and the hour they skip does not exist.
// None of this depends on what time.Date returns in those cases, which Go leaves
// unspecified. Zones come from time.LoadLocation: a program that must not depend on
// the machine's zone database imports time/tzdata.
//
// # In a saga
//
// A saga handler requests a timeout by a rule with saga.Context.RequestTimeoutBy; the
// dispatcher finds the calendar in the Registry given to it (saga.WithCalendars), computes
// the instant once, and stores the rule, the calendar's [Ref] and the instant it counted from
// with the timeout:
//
//	_, err := c.RequestTimeoutBy(calendar.BusinessDays(3).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), graceOver{})
//
// saga.Dispatcher.ReplanTimeouts plans a saga type's pending timeouts again under a new
// version of a calendar.
//
// # When a calendar changes
//
// A computed instant does not move when its calendar changes. Publishing a new version
// of a calendar (a holiday announced, a mistake fixed) leaves pending timeouts at the
// instants they were given, until they are planned again from their rule with the new
// calendar. Give every change of a calendar a new version, and keep old versions in the
// Registry while anything names them.
//
// # Errors
//
// Every error wraps one of [ErrInvalidOption], [ErrInvalidCalendar], [ErrInvalidRule],
// [ErrNoBusinessDay] or [ErrUnknownCalendar]; match them with errors.Is. A rule never
// looks more than 366 days ahead (or back) for a business day: a calendar without one is an
// error, not a loop.
package calendar
