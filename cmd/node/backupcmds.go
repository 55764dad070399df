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
Restore the default log's backup into a new cluster with 'node restore'.`)
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
	return fmt.Sprintf("%s (%d replicas, retention %s)", name, l.Replicas, formatRetention(l.RetentionBytes, l.RetentionAge))
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
		cfg   node.RestoreConfig
		in    string
		check bool
	)
	fs := newFlagSet(e, "restore", "", `
Writes the data dir of one member of a new cluster from a backup ('node
backup'). Run it on every member with the same backup and the same
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

The new cluster is a cluster of its own: never list in --bootstrap an
address where a member of the old cluster still runs.

--check only reads and checks the file and says what it holds.`)
	fs.StringVar(&in, "in", "", "the backup `file` to read (required; never taken from the environment); - reads stdin")
	fs.StringVar(&cfg.ID, "id", "", "the `id` of the node this data dir is for (required)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "the node's data `directory`, missing or empty (required)")
	fs.Var(peersValue{&cfg.Bootstrap}, "bootstrap", "the members of the new cluster, this node included: `id=host:port,...` (raft addresses; required)")
	fs.BoolVar(&check, "check", false, "only check the backup file and print what it holds; write nothing")
	fs.fromEnv("id", "data-dir", "bootstrap")
	rest, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(rest); err != nil {
		return err
	}
	switch {
	case in == "":
		return usagef("no backup file: give --in FILE")
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
		h, s, err := backup.Verify(br)
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		fmt.Fprintf(e.stdout, "%s: a raftlog backup, format version %d, of %s, of index %d (term %d), taken %s: %d entries from index %d, %s of data, %s in all; every checksum matches\n",
			in, h.Version, describeSource(h), h.Index, h.Term, h.Created.UTC().Format(time.RFC3339), s.Entries, h.Floor, formatSize(int64(s.DataBytes)), formatSize(s.Size))
		return nil
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "restore", Level: hclog.Warn, Output: e.stderr})
	info, err := node.Restore(br, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	var peers []string
	for _, p := range cfg.Bootstrap {
		peers = append(peers, p.ID+"="+p.RaftAddr)
	}
	fmt.Fprintf(e.stdout, "restored the backup of index %d (term %d) into %s: %d entries from index %d, %d client sessions\n"+
		"start the node with: node serve --id %s --data-dir %s --bootstrap %s (and its addresses)\n",
		info.Header.Index, info.Header.Term, cfg.DataDir, info.Summary.Entries, info.Header.Floor, info.Sessions,
		cfg.ID, cfg.DataDir, strings.Join(peers, ","))
	return nil
}
