package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

// env is what a command sees of its process: the standard streams and the
// environment. main fills it from the os package; tests fill it with
// buffers and a map, so that no test changes the process environment.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// lookup returns an environment variable, like os.LookupEnv.
	lookup func(key string) (string, bool)
}

// usageError is a mistake in a command line or in a RAFTLOG_* variable:
// the command exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a *usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp is returned by a command whose help was asked for: it printed its
// usage and the process exits with status 0.
var errHelp = flag.ErrHelp

// envPrefix starts the environment variable a flag falls back to.
const envPrefix = "RAFTLOG_"

// envName returns the environment variable of the flag name: --data-dir
// falls back to RAFTLOG_DATA_DIR.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSet is the flag set of one command. Flags named by fromEnv fall back
// to their RAFTLOG_* variable when not given on the command line; the
// others do not, so that a variable set for one command cannot make a
// destructive one (remove --id, trim --below) act on its own.
type flagSet struct {
	*flag.FlagSet
	e       *env
	cmd     string          // the command's name
	args    string          // the synopsis of its arguments, after [flags]
	summary string          // paragraphs under the synopsis
	env     map[string]bool // flags that fall back to the environment
	hidden  map[string]bool // flags the usage does not list
	fromVar []envUse        // set by parse: the flags it took from the environment, in name order
}

// envUse is a flag that parse set from its environment variable.
type envUse struct {
	flag     string // the flag's name
	variable string // RAFTLOG_...
	value    string // the variable's value
}

// newFlagSet returns the flag set of command cmd, which takes the
// arguments args (for the synopsis) and does what summary says.
func newFlagSet(e *env, cmd, args, summary string) *flagSet {
	fs := &flagSet{
		FlagSet: flag.NewFlagSet(cmd, flag.ContinueOnError),
		e:       e,
		cmd:     cmd,
		args:    args,
		summary: summary,
		env:     map[string]bool{},
		hidden:  map[string]bool{},
	}
	fs.SetOutput(io.Discard) // errors are reported by run, in one line
	fs.Usage = func() {}
	return fs
}

// fromEnv makes the named flags fall back to their environment variables.
func (fs *flagSet) fromEnv(names ...string) {
	for _, n := range names {
		if fs.Lookup(n) == nil {
			panic("fromEnv: no flag " + n)
		}
		fs.env[n] = true
	}
}

// allFromEnv makes every flag defined so far fall back to its environment
// variable.
func (fs *flagSet) allFromEnv() {
	fs.VisitAll(func(f *flag.Flag) { fs.env[f.Name] = true })
}

// parse parses args, then sets every flag that falls back to the
// environment and was not given from its variable. Flags may come before,
// between and after the arguments; only "--" ends them, and everything
// after it is an argument, "-x" or not. An argument that looks like a flag
// ("-x", "--x") and names none is a usage error, so that a mistyped flag
// is never taken for a record. parse returns the arguments; errHelp after
// printing the usage to stdout for -h; a *usageError for a bad flag or
// variable.
func (fs *flagSet) parse(args []string) ([]string, error) {
	flags, rest, err := fs.split(args)
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.printUsage(fs.e.stdout)
			return nil, errHelp
		}
		// The flag package names flags with one dash; usage shows two.
		// (A syntax error quotes the argument as given.)
		msg := err.Error()
		for _, p := range []string{"for flag -", "not defined: -", "needs an argument: -"} {
			msg = strings.Replace(msg, p, p+"-", 1)
		}
		return nil, &usageError{msg: msg}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || !fs.env[f.Name] || fs.e.lookup == nil {
			return
		}
		v, ok := fs.e.lookup(envName(f.Name))
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("%s=%q: %v", envName(f.Name), v, serr)
			return
		}
		fs.fromVar = append(fs.fromVar, envUse{flag: f.Name, variable: envName(f.Name), value: v})
	})
	return rest, err
}

// changed returns the flags set, on the command line or from the
// environment, to values other than their defaults, as their names and
// values, in name order. Call it after parse.
func (fs *flagSet) changed() []transport.Setting {
	var out []transport.Setting
	fs.Visit(func(f *flag.Flag) {
		if v := f.Value.String(); v != f.DefValue {
			out = append(out, transport.Setting{Name: f.Name, Value: v})
		}
	})
	return out
}

// split separates args into flags, with the values of those that take
// one, and the other arguments, in order. It returns a *usageError for an
// argument that looks like a flag but names none.
func (fs *flagSet) split(args []string) (flags, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(rest, args[i+1:]...), nil
		case len(a) < 2 || a[0] != '-':
			rest = append(rest, a) // "-" alone is an argument, as for stdin
			continue
		}
		flags = append(flags, a)
		name, _, inline := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "" || name[0] == '-' || name == "h" || name == "help" {
			continue // fs.Parse reports the syntax error or prints the help
		}
		f := fs.Lookup(name)
		if f == nil {
			if fs.args == "" {
				return nil, nil, usagef("unknown flag %s", a)
			}
			return nil, nil, usagef("unknown flag %s (an argument that starts with - goes after --: node %s [flags] -- %s)", a, fs.cmd, a)
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() || inline {
			continue
		}
		if i+1 < len(args) { // the flag's value, whatever it looks like
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest, nil
}

// given reports whether the flag name was set, on the command line or
// from the environment. Call it after parse.
func (fs *flagSet) given(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// onCommandLine reports whether the flag name was given on the command
// line, not taken from its environment variable. Call it after parse.
func (fs *flagSet) onCommandLine(name string) bool {
	for _, u := range fs.fromVar {
		if u.flag == name {
			return false
		}
	}
	return fs.given(name)
}

// noArgs returns a *usageError when a command that takes no arguments got
// some.
func noArgs(rest []string) error {
	if len(rest) > 0 {
		return usagef("unexpected argument %q: the command takes only flags", rest[0])
	}
	return nil
}

// printUsage writes the command's synopsis, summary and flags to w.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: node %s [flags]", fs.cmd)
	if fs.args != "" {
		fmt.Fprintf(w, " %s", fs.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(fs.summary))
	if fs.args != "" {
		fmt.Fprint(w, "\nFlags may come before or after the arguments; an argument that starts\nwith - goes after --, which ends the flags.\n")
	}
	var b strings.Builder
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if fs.hidden[f.Name] {
			return
		}
		n++
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		if fs.env[f.Name] {
			fmt.Fprintf(&b, " [$%s]", envName(f.Name))
		}
		b.WriteString("\n")
	})
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", b.String())
	}
}

// sizeValue is a flag.Value of a byte count written as 1048576, 64KiB,
// 500MiB, 10GiB or 1.5TB.
type sizeValue struct{ n *int64 }

func (v sizeValue) String() string {
	if v.n == nil || *v.n == 0 {
		return "0"
	}
	return formatSize(*v.n)
}

func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

// sizeUnits are the units parseSize accepts, lower case. The IEC units and
// the bare letters count in powers of 1024, the SI ones in powers of 1000.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// parseSize parses a byte count: a non-negative number, possibly with a
// fraction, and an optional unit (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB;
// K, M, G, T mean KiB, MiB, GiB, TiB), case-insensitive.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q: want bytes with an optional unit, as in 4096, 64KiB, 500MiB, 10GiB or 1GB", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 63)
		if err != nil || mult > 1 && n > uint64(math.MaxInt64/int64(mult)) {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return int64(n) * int64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %q is not a number", s, num)
	}
	f *= mult
	if f >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(math.Round(f)), nil
}

// formatSize writes n bytes for people: 0, 512B, 64KiB, 1.5GiB.
func formatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	f := float64(n)
	u := -1
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + string(units[u]) + "iB"
}

// durationValue is a flag.Value of a duration as time.ParseDuration reads
// it, with days allowed in front: 7d, 1d12h, 90m.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseDuration parses a non-negative duration, with a whole number of
// days allowed in front ("7d", "1d12h").
func parseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("invalid duration %q: want a duration such as 90s, 36h, 7d or 1d12h", s)
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, bad
	}
	var d time.Duration
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		days, err := strconv.ParseUint(rest[:i], 10, 32)
		if err != nil || days > 100*365 {
			return 0, bad
		}
		d = time.Duration(days) * 24 * time.Hour
		rest = rest[i+1:]
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, bad
		}
		d += r
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: negative", s)
	}
	return d, nil
}

// addrsValue is a flag.Value of host:port addresses, separated by commas;
// a repeated flag adds to the list.
type addrsValue struct{ addrs *[]string }

func (v addrsValue) String() string {
	if v.addrs == nil {
		return ""
	}
	return strings.Join(*v.addrs, ",")
}

func (v addrsValue) Set(s string) error {
	added := false
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := checkHostPort(a); err != nil {
			return err
		}
		*v.addrs = append(*v.addrs, a)
		added = true
	}
	if !added {
		return errors.New("no address given")
	}
	return nil
}

// namesValue is a flag.Value of names separated by commas; a repeated flag
// adds to the list.
type namesValue struct{ names *[]string }

func (v namesValue) String() string {
	if v.names == nil {
		return ""
	}
	return strings.Join(*v.names, ",")
}

func (v namesValue) Set(s string) error {
	added := false
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			*v.names = append(*v.names, a)
			added = true
		}
	}
	if !added {
		return errors.New("no name given")
	}
	return nil
}

// checkHostPort checks that a is host:port with a numeric port.
func checkHostPort(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("address %q is not host:port", a)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("address %q: bad port %q", a, port)
	}
	return nil
}

// addrValue is a flag.Value of one host:port address.
type addrValue struct{ addr *string }

func (v addrValue) String() string {
	if v.addr == nil {
		return ""
	}
	return *v.addr
}

func (v addrValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if err := checkHostPort(s); err != nil {
		return err
	}
	*v.addr = s
	return nil
}

// peersValue is a flag.Value of the initial members of a cluster:
// id=host:port,id=host:port (raft addresses).
type peersValue struct{ peers *[]node.Peer }

func (v peersValue) String() string {
	if v.peers == nil {
		return ""
	}
	parts := make([]string, len(*v.peers))
	for i, p := range *v.peers {
		parts[i] = p.ID + "=" + p.RaftAddr
	}
	return strings.Join(parts, ",")
}

func (v peersValue) Set(s string) error {
	peers, err := node.ParsePeers(s)
	if err != nil {
		return err
	}
	*v.peers = peers
	return nil
}

// flushValue is a flag.Value of a node.FlushMode.
type flushValue struct{ mode *node.FlushMode }

func (v flushValue) String() string {
	if v.mode == nil {
		return ""
	}
	return string(*v.mode)
}

func (v flushValue) Set(s string) error {
	switch m := node.FlushMode(strings.ToLower(strings.TrimSpace(s))); m {
	case node.FlushSync, node.FlushAsync:
		*v.mode = m
		return nil
	}
	return fmt.Errorf("flush mode %q: want sync or async", s)
}

// levelValue is a flag.Value of an hclog level.
type levelValue struct{ level *hclog.Level }

func (v levelValue) String() string {
	if v.level == nil {
		return ""
	}
	return v.level.String()
}

func (v levelValue) Set(s string) error {
	l := hclog.LevelFromString(strings.TrimSpace(s))
	if l == hclog.NoLevel {
		return fmt.Errorf("log level %q: want trace, debug, info, warn, error or off", s)
	}
	*v.level = l
	return nil
}

// uint32Value is a flag.Value of a count that fits 32 bits.
type uint32Value struct{ n *uint32 }

func (v uint32Value) String() string {
	if v.n == nil {
		return ""
	}
	return strconv.FormatUint(uint64(*v.n), 10)
}

func (v uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return fmt.Errorf("%q is not a count from 0 to %d", s, uint32(math.MaxUint32))
	}
	*v.n = uint32(n)
	return nil
}
