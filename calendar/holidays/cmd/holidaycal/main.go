// Command holidaycal writes the calendar file (see calendar.Load) of a
// country's holidays for a range of years, for the jetsaga command's
// --calendar flags (timeouts replan, schedules show) and for services that
// load calendars from files:
//
//	go run github.com/jetsaga/jetsaga/calendar/holidays/cmd/holidaycal pl 2027..2030 > pl.cal
//	go run github.com/jetsaga/jetsaga/calendar/holidays/cmd/holidaycal -list
//
// The file's first lines say what it was built from: the calendar's name
// and version (holidays.Country's), which a service gives calendar.New
// with the file, so that a timeout planned on the file's days and one
// planned on holidays.Country's name the same calendar.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/jetsaga/jetsaga/calendar/holidays"
)

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "holidaycal:", err)
		os.Exit(2)
	}
}

var errUsage = errors.New("usage: holidaycal CODE FIRST..LAST (holidaycal -list for the codes)")

func run(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("holidaycal", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	list := fs.Bool("list", false, "list the country and region codes")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if *list {
		_, err := fmt.Fprintln(out, strings.Join(holidays.Codes(), "\n"))
		return err
	}
	if fs.NArg() != 2 {
		return errUsage
	}
	code := strings.ToLower(fs.Arg(0))
	a, b, ok := strings.Cut(fs.Arg(1), "..")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%w: years %q: FIRST..LAST, such as 2027..2030", errUsage, fs.Arg(1))
	}
	days, err := holidays.Days(code, first, last)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# %s: the holidays of %s in %d..%d from github.com/rickar/cal/v2 %s (jetsaga calendar/holidays)\n",
		code, code, first, last, holidays.LibraryVersion)
	fmt.Fprintf(out, "# calendar.New(%q, %q, ...) names the same calendar as holidays.Country(%q, %d, %d)\n",
		code, holidays.Version(first, last), code, first, last)
	fmt.Fprintln(out, "weekend Sat Sun")
	for _, h := range days {
		if _, err := fmt.Fprintln(out, h.String()); err != nil {
			return err
		}
	}
	return nil
}
