// Command jetsaga-calendars writes the calendar file (see calendar.Load)
// of a country's holidays for a range of years, for the jetsaga command's
// --calendar flags (timeouts replan, schedules show) and for services that
// load calendars from files. Installed on PATH, it is the jetsaga
// command's "calendars" plugin:
//
//	go install github.com/jetsaga/jetsaga/calendar/holidays/cmd/jetsaga-calendars@latest
//	jetsaga calendars export pl 2027..2030 > pl.cal
//	jetsaga calendars list
//
// The file's first lines say what it was built from: the calendar's name
// and version (holidays.Country's), which a service gives calendar.New
// with the file, so that a timeout planned on the file's days and one
// planned on holidays.Country's name the same calendar.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/jetsaga/jetsaga/calendar/holidays"
)

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "jetsaga calendars:", err)
		os.Exit(2)
	}
}

var errUsage = errors.New(`usage: jetsaga calendars export CODE FIRST..LAST | jetsaga calendars list`)

func run(out io.Writer, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	switch cmd, args := args[0], args[1:]; cmd {
	case "list":
		if len(args) != 0 {
			return errUsage
		}
		_, err := fmt.Fprintln(out, strings.Join(holidays.Codes(), "\n"))
		return err
	case "export":
		if len(args) != 2 {
			return errUsage
		}
		return export(out, strings.ToLower(args[0]), args[1])
	case "help", "-h", "--help":
		_, err := fmt.Fprintln(out, errUsage.Error())
		return err
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

// export writes the calendar file of code's holidays in the years
// FIRST..LAST.
func export(out io.Writer, code, years string) error {
	a, b, ok := strings.Cut(years, "..")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%w: years %q: FIRST..LAST, such as 2027..2030", errUsage, years)
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
