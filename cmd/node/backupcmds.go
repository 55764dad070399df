package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlog/raftlog/backup"
	"github.com/raftlog/raftlog/client"
	"github.com/raftlog/raftlog/commitlog/vfs"
	"github.com/raftlog/raftlog/node"
	"github.com/raftlog/raftlog/transport"
)

// cmdBackup is "node backup".
func cmdBackup(ctx context.Context, e *env, args []string) error {
	var cf clusterFlags
	var out, logName string
	fs := newFlagSet(e, "backup", "", `
Writes a backup of a log of a running cluster to a file: the retained log and
the state (client sessions included) as of one committed index, at least the
commit index when the backup began, so every append acknowledged before it
is in the file. The log's leader sends it while appends go on; entries a
trim drops meanwhile stay on the leader's disk until the backup ends. The
file names the log and its settings (replicas, retention). It is checked as
it arrives and goes to FILE.part, which is renamed to FILE once it is
complete and synced; FILE must not exist. With TLS, only an admin
(--tls-admins of the nodes) may take a backup.
Restore it with 'node restore': into a new log of a running cluster
(--log NAME), or, a backup of the default log, into a new cluster.`)
	cf.define(fs)
	fs.StringVar(&out, "out", "", "the backup `file` to write (required; never taken from the environment); - writes to stdout")
	logFlag(fs, &logName, "back up")
	if err := parseClusterCmd(fs, &cf, args); err != nil {
		return err
	}
	if out == "" {
		return usagef("no output file: give --out FILE")
	}
	if err := checkLogFlag(logName); err != nil {
		return err
	}
	report := e.stdout
	var (
		dst  io.Writer
		file *os.File
		part = out + ".part"
	)
	if out == "-" {
		dst, report = e.stdout, e.stderr
	} else {
		if _, err := os.Lstat(out); err == nil {
			return fmt.Errorf("%s exists: give another file, or remove it first", out)
		}
		var err error
		file, err = os.OpenFile(part, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: another backup is writing it, or one was interrupted; remove it first", part)
		}
		if err != nil {
			return err
		}
		dst = file
		defer func() {
			if file != nil { // not renamed into place
				file.Close()
				os.Remove(part)
			}
		}()
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	// The bytes go to the file and, through a pipe, to a reader that
	// checks them as they come.
	pr, pw := io.Pipe()
	type verdict struct {
		h   backup.Header
		s   backup.Summary
		err error
	}
	checked := make(chan verdict, 1)
	go func() {
		h, s, err := backup.Verify(pr)
		pr.CloseWithError(err) // a bad stream fails the writes, and the backup
		checked <- verdict{h, s, err}
	}()
	bw := bufio.NewWriterSize(dst, 1<<20)
	start := time.Now()
	_, err = c.Log(logName).Backup(ctx, io.MultiWriter(bw, pw))
	pw.CloseWithError(err)
	v := <-checked
	switch {
	case v.err != nil && (err == nil || errors.Is(err, v.err)):
		return fmt.Errorf("the backup received does not check out: %w", v.err)
	case err != nil:
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if file != nil {
		if err := syncAndRename(file, part, out); err != nil {
			return err
		}
		file = nil
	}
	of := ""
	if logName != transport.DefaultLog {
		of = "of log " + logName + " "
	}
	fmt.Fprintf(report, "backup %sof index %d (term %d): %d entries from index %d, %s, in %v, written to %s\n",
		of, v.h.Index, v.h.Term, v.s.Entries, v.h.Floor, formatSize(v.s.Size), time.Since(start).Round(time.Millisecond), out)
	return nil
}

// describeSource says which log a backup is of, and with what settings.
func describeSource(h backup.Header) string {
	l := h.Log
	if h.Version == 1 {
		return "the default log (settings not recorded)"
	}
	name := "log " + l.Name
	if l.Name == transport.DefaultLog {
		name = "the default log"
	}
	return fmt.Sprintf("%s (%s, retention %s)", name, plural(int(l.Replicas), "replica"), formatRetention(l.RetentionBytes, l.RetentionAge))
}

// syncAndRename makes the file f, written at part, durable and renames it
// to name, durably.
func syncAndRename(f *os.File, part, name string) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", part, err)
	}
	if err := os.Rename(part, name); err != nil {
		return err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(name)); err != nil {
		return fmt.Errorf("sync the directory of %s: %w", name, err)
	}
	return nil
}

// cmdRestore is "node restore".
func cmdRestore(ctx context.Context, e *env, args []string) error {
	var (
		cfg      node.RestoreConfig
		in       string
		check    bool
		logName  string
		cf       clusterFlags
		replicas int
		bytes    int64
		age      time.Duration
	)
	fs := newFlagSet(e, "restore", "", `
With --log NAME, restores a backup ('node backup', of any log) into a new
log NAME of a running cluster (--addrs): it creates the log, with the
replicas and retention the backup was taken with unless --replicas,
--retention-bytes or --retention-age say otherwise (a name in use is
refused), uploads the file to the log's leader and has it restored there:
every record keeps its index, client sessions are kept, and appends go on
after the backup's index, on every replica. Until the restore is done, and
for good if it is cut short, the log refuses appends and reads (Failed
Precondition): delete it ('node log delete NAME --yes') and restore again.
With TLS, only an admin may restore.

Without --log, writes the data dir of one member of a new cluster from a
backup of the default log. Run it on every member with the same backup and the same
--bootstrap list, each with its own --id and --data-dir, then start each
with 'node serve' and the same --id, --data-dir and --bootstrap list: the
members elect a leader among themselves without bootstrapping or asking
anyone. Records keep their indexes, client sessions are kept (a retried
append is still recognised), and appends go on after the backup's index.

The data dir must be missing or empty. The whole backup is checked as it
is read; a damaged or truncated file is refused, naming the cause, and
nothing is left in the data dir. Restoring a majority of the members is
enough: one started with an empty data dir and the same --bootstrap list
joins them and gets the records from their leader.

The new cluster is a cluster of its own, with a cluster id that restore
derives from the backup, the --bootstrap list and --cluster-token: the same
on every member restored with the same three, and never the old cluster's,
so the new cluster's nodes and the old cluster's refuse each other's raft
connections. restore prints it and writes it into the data dir's file
cluster-id. Two restores of one backup onto the same --bootstrap list get
the same id: give each its own --cluster-token if both clusters may run at
once. Still, never list in --bootstrap an address where a node of the old
cluster runs: the new cluster has that member down.

--check only reads and checks the file and says what it holds; with
--bootstrap (and --cluster-token), also the cluster id a restore onto
those members gives.`)
	fs.StringVar(&in, "in", "", "the backup `file` to read (required; never taken from the environment); - reads stdin")
	fs.StringVar(&cfg.ID, "id", "", "the `id` of the node this data dir is for (required)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "the node's data `directory`, missing or empty (required)")
	fs.Var(peersValue{&cfg.Bootstrap}, "bootstrap", "the members of the new cluster, this node included: `id=host:port,...` (raft addresses; required)")
	fs.StringVar(&cfg.ClusterToken, "cluster-token", "", "a `token` that goes into the new cluster's id, the same on every member's restore; default none (give two restores of one backup onto the same members different tokens if both clusters may run at once)")
	fs.BoolVar(&check, "check", false, "only check the backup file and print what it holds (and, with --bootstrap, the cluster id a restore gives); write nothing")
	fs.fromEnv("id", "data-dir", "bootstrap")
	fs.StringVar(&logName, "log", "", "restore into a new log of this `name` of a running cluster (--addrs), not into a data dir")
	cf.define(fs)
	fs.IntVar(&replicas, "replicas", 0, "with --log: how many `nodes` hold the new log, 1, 3 or 5; default: as in the backup")
	fs.Var(sizeValue{&bytes}, "retention-bytes", "with --log: the new log's retention in `bytes`; default: as in the backup")
	fs.Var(durationValue{&age}, "retention-age", "with --log: the new log's retention `duration`; default: as in the backup")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	if in == "" {
		return usagef("no backup file: give --in FILE")
	}
	if logName != "" && !check {
		switch {
		case logName == transport.DefaultLog:
			return usagef("--log %s: the default log is restored into the data dirs of a new cluster: leave --log out", logName)
		case fs.onCommandLine("id") || fs.onCommandLine("data-dir") || fs.onCommandLine("bootstrap") || fs.given("cluster-token"):
			return usagef("--log restores into a running cluster (--addrs): --id, --data-dir, --bootstrap and --cluster-token are for a new cluster's data dirs")
		case replicas != 0 && replicas != 1 && replicas != 3 && replicas != 5:
			return usagef("--replicas %d: a log has 1, 3 or 5", replicas)
		}
		if err := checkLogFlag(logName); err != nil {
			return err
		}
		if err := cf.check(); err != nil {
			return err
		}
		settings := logSettings{replicas: replicas, bytes: bytes, age: age,
			bytesGiven: fs.given("retention-bytes"), ageGiven: fs.given("retention-age")}
		return restoreLog(ctx, e, &cf, in, logName, settings)
	}
	switch {
	case fs.given("replicas") || fs.given("retention-bytes") || fs.given("retention-age"):
		return usagef("--replicas and the retention flags go with --log NAME")
	case check:
	case cfg.ID == "":
		return usagef("no node id: give --id or set %s", envName("id"))
	case cfg.DataDir == "":
		return usagef("no data dir: give --data-dir or set %s", envName("data-dir"))
	case len(cfg.Bootstrap) == 0:
		return usagef("no members: give --bootstrap id=host:port,... (the new cluster's members) or set %s", envName("bootstrap"))
	case !hasPeer(cfg.Bootstrap, cfg.ID):
		return usagef("--bootstrap does not list this node (%s)", cfg.ID)
	}
	src := io.Reader(e.stdin)
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		src = f
	}
	br := bufio.NewReaderSize(src, 1<<20)
	if check {
		bk, err := backup.NewReader(br)
		if err == nil {
			err = bk.Verify()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		h, s := bk.Header(), bk.Summary()
		fmt.Fprintf(e.stdout, "%s: a raftlog backup, format version %d, of %s, of index %d (term %d), taken %s: %d entries from index %d, %s of data, %s in all; every checksum matches\n",
			in, h.Version, describeSource(h), h.Index, h.Term, h.Created.UTC().Format(time.RFC3339), s.Entries, h.Floor, formatSize(int64(s.DataBytes)), formatSize(s.Size))
		if h.Log.Name == backup.DefaultLog {
			names, err := node.BackupNamedLogs(bk.State())
			if err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			if len(names) > 0 {
				fmt.Fprintf(e.stdout, "its catalog lists the named logs %s, whose records it does not hold: a cluster restored from it starts without them (restore each from its own backup with --log)\n", strings.Join(names, ", "))
			}
			if len(cfg.Bootstrap) == 0 {
				fmt.Fprintf(e.stdout, "a cluster restored from it has a cluster id of its own, derived from the file, the --bootstrap list and --cluster-token: give them with --check to see it\n")
				return nil
			}
			id, err := node.RestoredClusterID(h, s, bk.State(), cfg.Bootstrap, cfg.ClusterToken)
			if err != nil {
				return usagef("--bootstrap: %v", err)
			}
			fmt.Fprintf(e.stdout, "restored onto --bootstrap %s%s, the new cluster's id is %s\n", peersValue{&cfg.Bootstrap}.String(), tokenNote(cfg.ClusterToken), id)
		}
		return nil
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "restore", Level: hclog.Warn, Output: e.stderr})
	info, err := node.Restore(br, cfg)
	if errors.Is(err, node.ErrNamedLogBackup) {
		return fmt.Errorf("%s: %w; restore it into a new log of a running cluster (--log NAME --addrs ADDRS)", in, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	fmt.Fprintf(e.stdout, "restored the backup of index %d (term %d) into %s: %d entries from index %d, %d client sessions\n"+
		"the new cluster's id is %s, derived from the backup and the --bootstrap list%s: every member restored with the same gets it\n"+
		"start the node with: node serve --id %s --data-dir %s --bootstrap %s (and its addresses)\n",
		info.Header.Index, info.Header.Term, cfg.DataDir, info.Summary.Entries, info.Header.Floor, info.Sessions,
		info.ClusterID, tokenNote(cfg.ClusterToken),
		cfg.ID, cfg.DataDir, peersValue{&cfg.Bootstrap}.String())
	if n := len(info.DroppedLogs); n > 0 {
		what := fmt.Sprintf("%d named logs (%s), whose records a backup of the default log does not hold: the new cluster starts without them", n, strings.Join(info.DroppedLogs, ", "))
		if n == 1 {
			what = fmt.Sprintf("the named log %s, whose records a backup of the default log does not hold: the new cluster starts without it", info.DroppedLogs[0])
		}
		fmt.Fprintf(e.stdout, "the backup's catalog lists %s; once it runs, restore each named log from its own backup: node restore --log NAME --in FILE --addrs ADDRS\n", what)
	}
	return nil
}

// tokenNote names a restore's cluster token, "" for none.
func tokenNote(token string) string {
	if token == "" {
		return ""
	}
	return fmt.Sprintf(" and --cluster-token %q", token)
}

// logSettings are the settings flags of a restore into a new log; a zero
// value, not given, means the backup's.
type logSettings struct {
	replicas             int
	bytes                int64
	age                  time.Duration
	bytesGiven, ageGiven bool
}

// restoreLog is "node restore --log NAME": it checks the file, creates the
// log and restores the file into it.
func restoreLog(ctx context.Context, e *env, cf *clusterFlags, in, name string, set logSettings) error {
	if in == "-" {
		return usagef("--in -: a restore into a log uploads a file it may have to read again: give the file")
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	h, s, err := backup.Verify(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	opts := client.CreateLogOptions{Replicas: int(h.Log.Replicas), RetentionBytes: h.Log.RetentionBytes, RetentionAge: h.Log.RetentionAge}
	if opts.Replicas != 1 && opts.Replicas != 5 {
		opts.Replicas = 3 // the default log's voters may be any number
	}
	if set.replicas != 0 {
		opts.Replicas = set.replicas
	}
	if set.bytesGiven {
		opts.RetentionBytes = uint64(set.bytes)
	}
	if set.ageGiven {
		opts.RetentionAge = set.age
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.CreateLog(ctx, name, opts)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.Code == transport.CodeFailedPrecondition && strings.Contains(te.Message, "exists already") {
			return fmt.Errorf("%w: a backup is restored into a new log: give another name, or delete the log first", err)
		}
		return err
	}
	start := time.Now()
	res, err := c.Log(name).Restore(ctx, f)
	if err != nil {
		fmt.Fprintf(e.stderr, "log %s holds no complete restore, or its outcome is unknown: if it refuses reads ('being restored'), delete it (node log delete %s --yes) and restore again\n", name, name)
		return err
	}
	fmt.Fprintf(e.stdout, "restored the backup of %s of index %d into log %s (id %d, %s, retention %s): %d entries from index %d, %s, in %v; on %d of its %s now; appends go after index %d\n",
		describeLogName(h), h.Index, name, info.ID, plural(int(info.Replicas), "replica"), formatRetention(info.RetentionBytes, info.RetentionAge),
		s.Entries, h.Floor, formatSize(s.Size), time.Since(start).Round(time.Millisecond), res.Replicas, plural(int(info.Replicas), "replica"), res.Index)
	return nil
}

// describeLogName names the log a backup is of: "log orders", "the
// default log".
func describeLogName(h backup.Header) string {
	if h.Log.Name == transport.DefaultLog {
		return "the default log"
	}
	return "log " + h.Log.Name
}
