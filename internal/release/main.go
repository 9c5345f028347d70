// Command release packs jetsaga's modules as a release would publish them
// and checks that what a user types works. It runs from the repository's
// root:
//
//	go run ./internal/release check            # what CI runs (make release-check)
//	go run ./internal/release prepare v0.2.0   # what make release runs before it tags
//
// check packs every released module (the root, calendar/holidays, saga/pgstore,
// saga/sagaotel, timeout/temporal) at the version the nested modules require of the root,
// into a module proxy in a temporary directory (the layout GOPROXY=file://
// serves), each nested module with the go.sum lines of the jetsaga modules
// it requires. Then, with only that proxy and the public one, from empty
// directories: both jetsaga commands install with go install ...@version
// and run; a consumer module that imports saga, kvstore, pgstore,
// timeout/temporal and sagaotel builds and runs a saga on an embedded
// nats-server (pgstore is built, not run: it needs a PostgreSQL server); and
// go mod tidy leaves every released module's go.mod and go.sum as they are
// (the committed ones may lack the jetsaga lines a release adds).
//
// prepare sets every nested module's requirement of jetsaga modules to the
// version, the go.work replacements to match, and writes the go.sum lines
// of the packed modules: the commit make release tags.
package main

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

const rootPath = "github.com/jetsaga/jetsaga"

// released are the modules a release publishes, each after those it
// requires. Examples and internal tools are not released.
var released = []string{".", "calendar/holidays", "saga/pgstore", "saga/sagaotel", "timeout/temporal"}

//go:embed testdata/consumer.go.txt
var consumerMain []byte

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "check":
		err = check()
	case "prepare":
		if len(os.Args) != 3 || !semver.IsValid(os.Args[2]) {
			usage()
		}
		err = prepare(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./internal/release check | prepare vX.Y.Z")
	os.Exit(2)
}

func step(format string, args ...any) {
	fmt.Printf("release: "+format+"\n", args...)
}

// mod is one released module as packed: its path, release go.mod and
// go.sum, and the hashes of its zip and go.mod for others' go.sum.
type mod struct {
	dir, path     string
	gomod, gosum  []byte
	zipHash       string
	modHash       string
	jetsagaDeps   []string
	committedMod  []byte
	committedSum  []byte
	zipFile, vers string
}

// requiredVersion is the version the nested modules require of the root:
// the one a release of this tree carries.
func requiredVersion() (string, error) {
	var v string
	for _, dir := range released[1:] {
		f, err := parseMod(dir)
		if err != nil {
			return "", err
		}
		for _, r := range f.Require {
			if r.Mod.Path == rootPath {
				if v != "" && r.Mod.Version != v {
					return "", fmt.Errorf("%s requires %s %s, another module %s: make release bumps them together", dir, rootPath, r.Mod.Version, v)
				}
				v = r.Mod.Version
			}
		}
	}
	if v == "" {
		return "", errors.New("no nested module requires " + rootPath)
	}
	return v, nil
}

func parseMod(dir string) (*modfile.File, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	return modfile.Parse(filepath.Join(dir, "go.mod"), b, nil)
}

func isJetsaga(p string) bool { return p == rootPath || strings.HasPrefix(p, rootPath+"/") }

// withoutJetsagaSums drops the go.sum lines of jetsaga's own modules.
func withoutJetsagaSums(sum []byte) []byte {
	var out bytes.Buffer
	for line := range strings.Lines(string(sum)) {
		if f := strings.Fields(line); len(f) > 0 && isJetsaga(f[0]) {
			continue
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

// pack writes every released module at version into proxy and returns
// them as packed.
func pack(version, proxy string) ([]*mod, error) {
	byPath := map[string]*mod{}
	var mods []*mod
	for _, dir := range released {
		f, err := parseMod(dir)
		if err != nil {
			return nil, err
		}
		m := &mod{dir: dir, path: f.Module.Mod.Path, vers: version}
		m.committedMod, _ = os.ReadFile(filepath.Join(dir, "go.mod"))
		m.committedSum, _ = os.ReadFile(filepath.Join(dir, "go.sum"))
		for _, r := range f.Require {
			if isJetsaga(r.Mod.Path) {
				if r.Mod.Version != version {
					return nil, fmt.Errorf("%s requires %s %s, want %s", dir, r.Mod.Path, r.Mod.Version, version)
				}
				m.jetsagaDeps = append(m.jetsagaDeps, r.Mod.Path)
			}
		}
		if len(f.Replace) > 0 {
			return nil, fmt.Errorf("%s/go.mod has replace directives: a user's go install refuses it (use go.work)", dir)
		}
		m.gomod = m.committedMod
		sum := withoutJetsagaSums(m.committedSum)
		for _, dep := range m.jetsagaDeps {
			d := byPath[dep]
			if d == nil {
				return nil, fmt.Errorf("%s requires %s, which is not released before it", dir, dep)
			}
			sum = fmt.Appendf(sum, "%s %s %s\n%s %s/go.mod %s\n", dep, version, d.zipHash, dep, version, d.modHash)
		}
		m.gosum = sortSum(sum)
		if err := m.write(proxy); err != nil {
			return nil, fmt.Errorf("packing %s: %w", dir, err)
		}
		byPath[m.path] = m
		mods = append(mods, m)
		step("packed %s@%s (%s)", m.path, version, m.zipHash)
	}
	return mods, nil
}

func sortSum(sum []byte) []byte {
	lines := strings.SplitAfter(strings.TrimRight(string(sum), "\n")+"\n", "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "" })
	slices.Sort(lines)
	return []byte(strings.Join(slices.Compact(lines), ""))
}

// file is a module file for modzip.Create: from the working tree, or
// given.
type file struct {
	path, disk string
	data       []byte
}

func (f file) Path() string { return f.path }
func (f file) Lstat() (fs.FileInfo, error) {
	if f.data != nil {
		return dataInfo{name: path.Base(f.path), size: int64(len(f.data))}, nil
	}
	return os.Lstat(f.disk)
}
func (f file) Open() (io.ReadCloser, error) {
	if f.data != nil {
		return io.NopCloser(bytes.NewReader(f.data)), nil
	}
	return os.Open(f.disk)
}

type dataInfo struct {
	name string
	size int64
}

func (i dataInfo) Name() string       { return i.name }
func (i dataInfo) Size() int64        { return i.size }
func (i dataInfo) Mode() fs.FileMode  { return 0o644 }
func (i dataInfo) ModTime() time.Time { return time.Time{} }
func (i dataInfo) IsDir() bool        { return false }
func (i dataInfo) Sys() any           { return nil }

// files lists the module's files as git tracks them in the working tree,
// with the release go.mod and go.sum, and the root's LICENSE in a nested
// module (as the module proxy adds it from the repository).
func (m *mod) files() ([]modzip.File, error) {
	out, err := exec.Command("git", "ls-files", "-z", "--", m.dir).Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files %s: %w", m.dir, err)
	}
	var fs []modzip.File
	haveLicense := false
	for p := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		rel := p
		if m.dir != "." {
			rel = strings.TrimPrefix(p, m.dir+"/")
		}
		switch rel {
		case "go.mod":
			fs = append(fs, file{path: rel, data: m.gomod})
		case "go.sum":
			fs = append(fs, file{path: rel, data: m.gosum})
		default:
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				continue // deleted in the working tree
			}
			fs = append(fs, file{path: rel, disk: p})
		}
		haveLicense = haveLicense || rel == "LICENSE"
	}
	if !haveLicense {
		fs = append(fs, file{path: "LICENSE", disk: "LICENSE"})
	}
	return fs, nil
}

// write adds m to the proxy: list, .info, .mod and .zip, and computes its
// hashes.
func (m *mod) write(proxy string) error {
	files, err := m.files()
	if err != nil {
		return err
	}
	escaped, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(proxy, escaped, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m.zipFile = filepath.Join(dir, m.vers+".zip")
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: m.path, Version: m.vers}, files); err != nil {
		return err
	}
	if err := os.WriteFile(m.zipFile, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, m.vers+".mod"), m.gomod, 0o644); err != nil {
		return err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, m.vers, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(dir, m.vers+".info"), []byte(info), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "list"), []byte(m.vers+"\n"), 0o644); err != nil {
		return err
	}
	if m.zipHash, err = dirhash.HashZip(m.zipFile, dirhash.Hash1); err != nil {
		return err
	}
	m.modHash, err = dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(m.gomod)), nil
	})
	return err
}

// env is the environment of a user who has only the proxy and the public
// one: no workspace, no replacements.
func env(proxy, gobin string) []string {
	var e []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOPROXY", "GOWORK", "GOFLAGS", "GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GOBIN", "PWD", "GODEBUG":
			continue
		}
		e = append(e, kv)
	}
	// goindex=0: the go command indexes a module's packages in its build
	// cache by path and version, which never change for a published
	// version; a check packs the same version from a changed tree, and a
	// stale index hides packages the tree added since (the module cache
	// itself is cleared by forgetCached).
	godebug := "goindex=0"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	return append(e, "GOPROXY=file://"+proxy+",https://proxy.golang.org", "GOWORK=off",
		"GONOSUMDB="+rootPath, "GOFLAGS=-modcacherw", "GOBIN="+gobin, "GODEBUG="+godebug)
}

func run(dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out, nil
}

// forgetCached removes jetsaga's modules from the module cache, where an
// earlier check may have left other contents under the same version.
func forgetCached() error {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return err
	}
	cache := strings.TrimSpace(string(out))
	for _, p := range []string{filepath.Join(cache, "cache", "download", "github.com", "jetsaga"), filepath.Join(cache, "github.com", "jetsaga")} {
		_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func check() error {
	version, err := requiredVersion()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "jetsaga-release-*")
	if err != nil {
		return err
	}
	if os.Getenv("JETSAGA_RELEASE_KEEP") == "" {
		defer os.RemoveAll(tmp)
	} else {
		step("keeping %s (JETSAGA_RELEASE_KEEP)", tmp)
	}
	proxy := filepath.Join(tmp, "proxy")
	step("packing the released modules at %s into %s", version, proxy)
	mods, err := pack(version, proxy)
	if err != nil {
		return err
	}
	if err := forgetCached(); err != nil {
		return err
	}

	for _, m := range mods {
		if err := tidy(m, tmp, proxy); err != nil {
			return err
		}
	}

	for _, cmd := range []string{rootPath + "/cmd/jetsaga", rootPath + "/timeout/temporal/cmd/jetsaga", rootPath + "/saga/pgstore/cmd/jetsaga"} {
		bin := filepath.Join(tmp, "bin", strings.ReplaceAll(cmd, "/", "_"))
		empty := filepath.Join(tmp, "empty-"+path.Base(path.Dir(path.Dir(cmd))))
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return err
		}
		step("go install %s@%s", cmd, version)
		if _, err := run(empty, env(proxy, bin), "go", "install", cmd+"@"+version); err != nil {
			return err
		}
		out, err := run(empty, nil, filepath.Join(bin, "jetsaga"), "--help")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "queues") {
			return fmt.Errorf("%s --help does not list its commands:\n%s", cmd, out)
		}
		step("%s@%s runs", cmd, version)
	}

	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), consumerMain, 0o644); err != nil {
		return err
	}
	e := env(proxy, filepath.Join(tmp, "bin"))
	step("a consumer module requires saga, kvstore, pgstore, timeout/temporal and sagaotel at %s", version)
	for _, args := range [][]string{
		{"mod", "init", "example.com/consumer"},
		{"get", rootPath + "@" + version, rootPath + "/timeout/temporal@" + version, rootPath + "/saga/sagaotel@" + version, rootPath + "/saga/pgstore@" + version},
		{"mod", "tidy"},
		{"vet", "."},
	} {
		if _, err := run(consumer, e, "go", args...); err != nil {
			return err
		}
	}
	out, err := run(consumer, e, "go", "run", ".")
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), "consumer: ok") {
		return fmt.Errorf("the consumer ran but did not finish its saga:\n%s", out)
	}
	step("the consumer ran a saga on an embedded nats-server")
	step("ok: %s installs and builds from a module proxy", version)
	return nil
}

// tidy runs go mod tidy on m as released, outside the workspace, and
// fails if it changes go.mod or go.sum, or if the committed files differ
// from the released ones other than in the jetsaga lines a release adds.
func tidy(m *mod, tmp, proxy string) error {
	if !bytes.Equal(m.committedMod, m.gomod) || !bytes.Equal(sortSum(withoutJetsagaSums(m.committedSum)), withoutJetsagaSums(m.gosum)) {
		return fmt.Errorf("%s: the committed go.mod/go.sum differ from the released ones", m.dir)
	}
	dir := filepath.Join(tmp, "tidy", strings.ReplaceAll(m.path, "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r, err := zip.OpenReader(m.zipFile)
	if err != nil {
		return err
	}
	defer r.Close()
	prefix := m.path + "@" + m.vers + "/"
	for _, f := range r.File {
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(f.Name, prefix)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		src, err := f.Open()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(src)
		src.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	if _, err := run(dir, env(proxy, filepath.Join(tmp, "bin")), "go", "mod", "tidy"); err != nil {
		return err
	}
	gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	gosum, _ := os.ReadFile(filepath.Join(dir, "go.sum"))
	if !bytes.Equal(gomod, m.gomod) {
		return fmt.Errorf("%s: go mod tidy changes go.mod:\n%s", m.dir, gomod)
	}
	if !bytes.Equal(sortSum(gosum), m.gosum) {
		return fmt.Errorf("%s: go mod tidy changes go.sum:\n%s\nwant\n%s", m.dir, gosum, m.gosum)
	}
	step("go mod tidy leaves %s@%s as it is", m.path, m.vers)
	return nil
}

// prepare bumps the nested modules' requirements of jetsaga modules and
// go.work's replacements to version and writes the go.sum lines of the
// released modules at it.
func prepare(version string) error {
	dirs, err := filepath.Glob("*/go.mod")
	if err != nil {
		return err
	}
	more, _ := filepath.Glob("*/*/go.mod")
	deeper, _ := filepath.Glob("*/*/*/go.mod")
	dirs = append(append(dirs, more...), deeper...)
	for _, gm := range dirs {
		dir := filepath.Dir(gm)
		f, err := parseMod(dir)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if isJetsaga(r.Mod.Path) {
				if _, err := run(dir, nil, "go", "mod", "edit", "-require="+r.Mod.Path+"@"+version); err != nil {
					return err
				}
			}
		}
	}
	w, err := os.ReadFile("go.work")
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork("go.work", w, nil)
	if err != nil {
		return err
	}
	for _, r := range wf.Replace {
		if isJetsaga(r.Old.Path) {
			if _, err := run(".", nil, "go", "work", "edit", "-dropreplace="+r.Old.Path+"@"+r.Old.Version,
				"-replace="+r.Old.Path+"@"+version+"="+r.New.Path); err != nil {
				return err
			}
		}
	}
	tmp, err := os.MkdirTemp("", "jetsaga-release-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mods, err := pack(version, tmp)
	if err != nil {
		return err
	}
	for _, m := range mods[1:] {
		if err := os.WriteFile(filepath.Join(m.dir, "go.sum"), m.gosum, 0o644); err != nil {
			return err
		}
		step("%s/go.sum: the hashes of jetsaga's modules at %s", m.dir, version)
	}
	return nil
}
