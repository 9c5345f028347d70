package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/calendar/holidays"
)

// The file written for Poland 2027..2030 loads as a calendar that agrees
// with holidays.Country's for every day of those years.
func TestExport(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, []string{"export", "pl", "2027..2030"}); err != nil {
		t.Fatal(err)
	}
	opt, err := calendar.Load(strings.NewReader(out.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	file, err := calendar.New("pl", holidays.Version(2027, 2030), opt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := holidays.Country("pl", 2027, 2030)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for d := (calendar.Date{Year: 2027, Month: 1, Day: 1}); d.Year <= 2030; d = d.AddDays(1) {
		if file.IsBusinessDay(d) != want.IsBusinessDay(d) {
			t.Fatalf("%s: the file says business day %v, Country %v", d, file.IsBusinessDay(d), want.IsBusinessDay(d))
		}
		if _, ok := file.Holiday(d); ok {
			n++
		}
	}
	if n < 4*12 {
		t.Errorf("%d holidays in four years of Poland's file; want at least 48 (12 a year)", n)
	}
	for _, args := range [][]string{nil, {"pl", "2027..2030"}, {"export", "pl"}, {"export", "pl", "2027"}, {"export", "pl", "x..y"}, {"list", "x"}} {
		if err := run(&out, args); !errors.Is(err, errUsage) {
			t.Errorf("jetsaga-calendars %q: %v, want the usage", args, err)
		}
	}
	if err := run(&out, []string{"export", "xx", "2027..2028"}); !errors.Is(err, holidays.ErrUnknownCountry) {
		t.Errorf("jetsaga-calendars export xx: %v", err)
	}
	out.Reset()
	if err := run(&out, []string{"list"}); err != nil || !strings.Contains(out.String(), "pl\n") || !strings.Contains(out.String(), "de-by\n") {
		t.Errorf("jetsaga-calendars list: %v\n%s", err, out.String())
	}
}

// Installed on PATH beside jetsaga, the command is jetsaga's calendars
// plugin: `jetsaga calendars export pl 2027..2027` writes the same file.
func TestAsJetsagaPlugin(t *testing.T) {
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, b := range [][]string{
		{"-o", filepath.Join(dir, "jetsaga-calendars"), "."},
		{"-o", filepath.Join(dir, "jetsaga"), "github.com/jetsaga/jetsaga/cmd/jetsaga"},
	} {
		if out, err := exec.Command(goBin, append([]string{"build"}, b...)...).CombinedOutput(); err != nil {
			t.Fatalf("go build %q: %v\n%s", b, err, out)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "jetsaga"), "calendars", "export", "pl", "2027..2027")
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("jetsaga calendars export pl 2027..2027: %v", err)
	}
	var want bytes.Buffer
	if err := run(&want, []string{"export", "pl", "2027..2027"}); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() || !strings.Contains(string(got), "2027-12-25") {
		t.Errorf("through jetsaga:\n%s\nwant:\n%s", got, want.String())
	}
	cmd = exec.Command(filepath.Join(dir, "jetsaga"), "calendars", "export", "xx", "2027..2027")
	cmd.Env = append(os.Environ(), "PATH="+dir)
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("jetsaga calendars export xx: %v, want exit status 2", err)
	}
}
