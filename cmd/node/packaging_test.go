package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The packaging files (../../packaging) and the README are checked against
// the code, so that they cannot rot: the settings each file gives "node
// serve" must pass its parser, and versions must match go.mod.

// repoFile returns the contents of a file of the repository, by its path
// from the repository root.
func repoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goModVersion returns the version of go.mod's go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(repoFile(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return m[1]
}

func TestReadmeGoVersion(t *testing.T) {
	want := goModVersion(t)
	m := regexp.MustCompile(`Needs Go (\S+) or later`).FindStringSubmatch(repoFile(t, "README.md"))
	if m == nil || m[1] != want {
		t.Errorf("README says %q, want \"Needs Go %s or later\" (go.mod's go line)", m, want)
	}
}

// serveEnv runs the parser of "node serve" on args with the variables
// vars, and returns its result.
func serveEnv(vars map[string]string, args []string) (*serveOptions, error) {
	e, _, _ := testEnv(vars)
	return parseServe(e, args)
}

// dockerfile is what the test reads of packaging/Dockerfile.
type dockerfile struct {
	stages     []string          // the images of the FROM lines
	run        []string          // RUN commands
	copies     []string          // COPY arguments
	env        map[string]string // ENV of the last stage
	user       string            // USER of the last stage
	volumes    []string
	expose     []string
	entrypoint []string // exec form
	cmd        []string // exec form
	stopSignal string
	args       map[string]bool // ARG names
}

// readDockerfile parses packaging/Dockerfile: instructions, one a line
// after joining lines continued with a backslash; comments dropped.
func readDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	text := repoFile(t, "packaging/Dockerfile")
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			cur += cont + " "
			continue
		}
		cur += l
		if strings.TrimSpace(cur) != "" {
			lines = append(lines, strings.TrimSpace(cur))
		}
		cur = ""
	}
	d := &dockerfile{env: map[string]string{}, args: map[string]bool{}}
	execForm := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("Dockerfile: %q is not in exec form (a JSON array): %v", s, err)
		}
		return v
	}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			d.stages = append(d.stages, strings.Fields(rest)[0])
			d.env, d.user = map[string]string{}, ""
		case "RUN":
			d.run = append(d.run, rest)
		case "COPY":
			d.copies = append(d.copies, rest)
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: want key=value", rest)
				}
				d.env[k] = v
			}
		case "USER":
			d.user = rest
		case "VOLUME":
			d.volumes = append(d.volumes, strings.Fields(rest)...)
		case "EXPOSE":
			d.expose = append(d.expose, strings.Fields(rest)...)
		case "ENTRYPOINT":
			d.entrypoint = execForm(rest)
		case "CMD":
			d.cmd = execForm(rest)
		case "STOPSIGNAL":
			d.stopSignal = rest
		case "ARG":
			name, _, _ := strings.Cut(rest, "=")
			d.args[name] = true
		case "WORKDIR":
		default:
			t.Fatalf("Dockerfile: instruction %s is new to this test: teach it", instr)
		}
	}
	return d
}

// buildCommand returns the RUN command of the Dockerfile that runs go
// build.
func (d *dockerfile) buildCommand(t *testing.T) string {
	t.Helper()
	for _, r := range d.run {
		if strings.Contains(r, "go build") {
			return r
		}
	}
	t.Fatal("Dockerfile: no go build")
	return ""
}

// port returns the port of host:port.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if len(d.stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a runtime stage", len(d.stages))
	}
	if want := "golang:" + goModVersion(t); d.stages[0] != want {
		t.Errorf("Dockerfile builds with %s, want %s (go.mod's go line)", d.stages[0], want)
	}
	if last := d.stages[len(d.stages)-1]; strings.HasPrefix(last, "golang") {
		t.Errorf("Dockerfile: the runtime image is %s, the toolchain's", last)
	}
	build := strings.Join(d.run, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "go build", "./cmd/node", "node.linkVersion=${VERSION}", "node.linkCommit=${COMMIT}"} {
		if !strings.Contains(build, want) {
			t.Errorf("Dockerfile: the build does not say %q:\n%s", want, build)
		}
	}
	if !d.args["VERSION"] || !d.args["COMMIT"] {
		t.Errorf("Dockerfile: build arguments %v, want VERSION and COMMIT", d.args)
	}
	if u, _, _ := strings.Cut(d.user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("Dockerfile: runs as user %q, want a non-root one", d.user)
	}
	bin := append(slices.Clone(d.entrypoint), d.cmd...)
	if len(bin) != 2 || bin[1] != "serve" {
		t.Fatalf("Dockerfile: runs %q, want <binary> serve", bin)
	}
	copied := false
	for _, c := range d.copies {
		copied = copied || strings.HasSuffix(c, " "+bin[0])
	}
	if !copied {
		t.Errorf("Dockerfile: nothing is copied to %s, the entrypoint", bin[0])
	}
	if d.stopSignal != "SIGTERM" {
		t.Errorf("Dockerfile: STOPSIGNAL %q, want SIGTERM, on which the node stops cleanly", d.stopSignal)
	}
	if dir := d.env["RAFTLOG_DATA_DIR"]; dir == "" || !slices.Equal(d.volumes, []string{dir}) {
		t.Errorf("Dockerfile: volumes %q, want the data dir %q", d.volumes, dir)
	}
	var ports []string
	for _, v := range []string{"RAFTLOG_CLIENT_ADDR", "RAFTLOG_RAFT_ADDR", "RAFTLOG_ADMIN_ADDR"} {
		ports = append(ports, port(t, d.env[v]))
	}
	if !slices.Equal(d.expose, ports) {
		t.Errorf("Dockerfile: exposes %q, want the client, raft and admin ports %q", d.expose, ports)
	}

	// The image's settings pass serve once a node is named and told what
	// to advertise; without the advertised addresses serve says so.
	vars := map[string]string{"RAFTLOG_ID": "n1"}
	for k, v := range d.env {
		vars[k] = v
	}
	if _, err := serveEnv(vars, bin[2:]); err == nil || !strings.Contains(err.Error(), "give --raft-advertise") {
		t.Errorf("the image without RAFTLOG_RAFT_ADVERTISE: %v, want serve to ask for it", err)
	}
	vars["RAFTLOG_RAFT_ADVERTISE"], vars["RAFTLOG_CLIENT_ADVERTISE"] = "n1:7001", "n1:7000"
	o, err := serveEnv(vars, bin[2:])
	if err != nil {
		t.Fatalf("the image's settings: %v", err)
	}
	if o.cfg.DataDir != d.volumes[0] || o.cfg.AdminAddr == "" {
		t.Errorf("the image's settings: data dir %q, admin address %q", o.cfg.DataDir, o.cfg.AdminAddr)
	}
}

// yamlLine is a line of a YAML file: its indentation and text.
type yamlLine struct {
	indent int
	text   string
	no     int // line number, from 1
}

// parseYAML parses the block-style YAML subset compose.yaml is written
// in: maps of scalars, maps and lists of scalars; comments on lines of
// their own. Anything else (anchors, flow style, multi-line scalars)
// fails the test, to be taught to it. Maps are map[string]any, lists
// []string, scalars string.
func parseYAML(t *testing.T, text string) map[string]any {
	t.Helper()
	var lines []yamlLine
	for i, l := range strings.Split(text, "\n") {
		s := strings.TrimLeft(l, " ")
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if strings.ContainsAny(s, "&*{[|>\t") || strings.Contains(s, " #") {
			t.Fatalf("compose.yaml line %d: %q is beyond this test's YAML parser: teach it", i+1, l)
		}
		lines = append(lines, yamlLine{indent: len(l) - len(s), text: s, no: i + 1})
	}
	scalar := func(s string) string {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		return strings.Trim(s, "'")
	}
	var block func(i, indent int) (any, int)
	block = func(i, indent int) (any, int) {
		if strings.HasPrefix(lines[i].text, "- ") {
			var list []string
			for ; i < len(lines) && lines[i].indent == indent && strings.HasPrefix(lines[i].text, "- "); i++ {
				list = append(list, scalar(strings.TrimPrefix(lines[i].text, "- ")))
			}
			return list, i
		}
		m := map[string]any{}
		for i < len(lines) && lines[i].indent == indent {
			k, v, ok := strings.Cut(lines[i].text, ":")
			if !ok {
				t.Fatalf("compose.yaml line %d: %q: want key: value", lines[i].no, lines[i].text)
			}
			v = strings.TrimSpace(v)
			i++
			switch {
			case v != "":
				m[k] = scalar(v)
			case i < len(lines) && lines[i].indent > indent:
				m[k], i = block(i, lines[i].indent)
			default:
				m[k] = nil
			}
		}
		if i < len(lines) && lines[i].indent > indent {
			t.Fatalf("compose.yaml line %d: unexpected indentation", lines[i].no)
		}
		return m, i
	}
	v, i := block(0, 0)
	if i != len(lines) {
		t.Fatalf("compose.yaml line %d: unexpected indentation", lines[i].no)
	}
	return v.(map[string]any)
}

func TestComposeFile(t *testing.T) {
	d := readDockerfile(t)
	doc := parseYAML(t, repoFile(t, "packaging/compose.yaml"))
	services, _ := doc["services"].(map[string]any)
	if len(services) != 3 {
		t.Fatalf("compose.yaml: %d services, want 3", len(services))
	}
	volumes, _ := doc["volumes"].(map[string]any)
	dataDir := d.env["RAFTLOG_DATA_DIR"]
	var bootstrap string
	ids := map[string]bool{}
	for name, sv := range services {
		s, _ := sv.(map[string]any)
		b, _ := s["build"].(map[string]any)
		if b == nil || b["context"] != ".." || b["dockerfile"] != "packaging/Dockerfile" {
			t.Errorf("%s: build %v, want the repository root with packaging/Dockerfile", name, b)
		}
		if g, err := time.ParseDuration(fmt.Sprint(s["stop_grace_period"])); err != nil || g < 30*time.Second {
			t.Errorf("%s: stop_grace_period %v, want at least 30s for a clean stop", name, s["stop_grace_period"])
		}
		vars := map[string]string{}
		for k, v := range d.env {
			vars[k] = v
		}
		env, _ := s["environment"].(map[string]any)
		for k, v := range env {
			vars[k] = fmt.Sprint(v)
		}
		o, err := serveEnv(vars, nil)
		if err != nil {
			t.Errorf("%s: serve refuses its settings: %v", name, err)
			continue
		}
		c := o.cfg
		if ids[c.ID] {
			t.Errorf("%s: id %s given twice", name, c.ID)
		}
		ids[c.ID] = true
		// Other services dial it by its service name.
		for _, a := range []string{c.RaftAdvertise, c.ClientAdvertise} {
			if host, _, _ := net.SplitHostPort(a); host != name {
				t.Errorf("%s: advertises %q, want its service name", name, a)
			}
		}
		if port(t, c.RaftAdvertise) != port(t, c.RaftAddr) || port(t, c.ClientAdvertise) != port(t, c.ClientAddr) {
			t.Errorf("%s: advertises %s and %s but listens on %s and %s", name, c.RaftAdvertise, c.ClientAdvertise, c.RaftAddr, c.ClientAddr)
		}
		// Its bootstrap entry must be the raft address it advertises: a
		// node refuses to start otherwise.
		entry := ""
		for _, p := range c.Bootstrap {
			if p.ID == c.ID {
				entry = p.RaftAddr
			}
		}
		if entry != c.RaftAdvertise {
			t.Errorf("%s: bootstrap entry %q, want the advertised raft address %q", name, entry, c.RaftAdvertise)
		}
		if bs := vars["RAFTLOG_BOOTSTRAP"]; bootstrap == "" {
			bootstrap = bs
		} else if bs != bootstrap {
			t.Errorf("%s: bootstrap list %q differs from another's %q", name, bs, bootstrap)
		}
		vols, _ := s["volumes"].([]string)
		if len(vols) != 1 || !strings.HasSuffix(vols[0], ":"+dataDir) {
			t.Errorf("%s: volumes %q, want one on the data dir %s", name, vols, dataDir)
		} else if v, _, _ := strings.Cut(vols[0], ":"); !hasKey(volumes, v) {
			t.Errorf("%s: volume %s is not declared", name, v)
		}
		ports, _ := s["ports"].([]string)
		for _, p := range ports {
			if !strings.HasPrefix(p, "127.0.0.1:") || !strings.HasSuffix(p, ":"+port(t, c.AdminAddr)) {
				t.Errorf("%s: publishes %q, want only the admin port, on the host's loopback", name, p)
			}
		}
	}
	if len(ids) == 3 && strings.Count(bootstrap, "=") != 3 {
		t.Errorf("bootstrap list %q, want the 3 services", bootstrap)
	}
}

// hasKey reports whether m has the key k.
func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// systemdDuration parses a systemd time span as units take it: "90",
// "90s", "1min 30s", "2min", "500ms".
func systemdDuration(s string) (time.Duration, error) {
	s = strings.ReplaceAll(s, " ", "")
	if _, err := strconv.ParseUint(s, 10, 32); err == nil {
		s += "s"
	}
	// Longest first: "minutes" before "min".
	s = strings.NewReplacer("minutes", "m", "minute", "m", "min", "m", "seconds", "s", "second", "s", "sec", "s",
		"hours", "h", "hour", "h", "hr", "h").Replace(s)
	return time.ParseDuration(s)
}

// unitFile is a systemd unit: the values of each key, per section.
type unitFile map[string]map[string][]string

// parseUnit parses a systemd unit file (no line continuations).
func parseUnit(t *testing.T, text string) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" || strings.HasSuffix(l, "\\") {
				t.Fatalf("raftlog.service line %d: %q", i+1, l)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one returns the single value of key in section, failing the test when
// the key is missing or repeated.
func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("raftlog.service: [%s] %s: %q, want one value", section, key, v)
	}
	return v[0]
}

func TestSystemdUnit(t *testing.T) {
	text := repoFile(t, "packaging/systemd/raftlog.service")
	u := parseUnit(t, text)
	for key, want := range map[string]string{
		"Restart":        "on-failure",
		"KillSignal":     "SIGTERM",
		"StateDirectory": "raftlog",
		"Type":           "simple",
	} {
		if got := u.one(t, "Service", key); got != want {
			t.Errorf("raftlog.service: %s=%s, want %s", key, got, want)
		}
	}
	if user := u.one(t, "Service", "User"); user == "" || user == "root" || user == "0" {
		t.Errorf("raftlog.service: User=%q, want a dedicated user", user)
	}
	if d, err := systemdDuration(u.one(t, "Service", "TimeoutStopSec")); err != nil || d < 30*time.Second {
		t.Errorf("raftlog.service: TimeoutStopSec %v (%v), want at least 30s for a clean stop", d, err)
	}
	if n, err := strconv.Atoi(u.one(t, "Service", "LimitNOFILE")); err != nil || n < 4096 {
		t.Errorf("raftlog.service: LimitNOFILE %d (%v), want room for 1,024 client connections and more", n, err)
	}

	// The settings it gives serve pass its parser: the unit's Environment=
	// lines, overridden by the example environment file.
	vars := map[string]string{}
	for _, e := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
	}
	if f := u.one(t, "Service", "EnvironmentFile"); f != "/etc/raftlog/raftlog.env" {
		t.Errorf("raftlog.service: EnvironmentFile=%s, want /etc/raftlog/raftlog.env, where raftlog.env installs", f)
	}
	for i, l := range strings.Split(repoFile(t, "packaging/systemd/raftlog.env"), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) {
			t.Fatalf("raftlog.env line %d: %q: want RAFTLOG_...=value", i+1, l)
		}
		vars[k] = v
	}
	start := strings.Fields(u.one(t, "Service", "ExecStart"))
	if len(start) < 2 || start[0] != "/usr/local/bin/raftlog" || start[1] != "serve" {
		t.Fatalf("raftlog.service: ExecStart=%q, want /usr/local/bin/raftlog serve", start)
	}
	o, err := serveEnv(vars, start[2:])
	if err != nil {
		t.Fatalf("serve refuses the unit's settings: %v", err)
	}
	if want := "/var/lib/" + u.one(t, "Service", "StateDirectory"); o.cfg.DataDir != want {
		t.Errorf("the unit's data dir %q, want its state directory %s", o.cfg.DataDir, want)
	}
	if len(o.cfg.Bootstrap) != 3 || o.cfg.AdminAddr == "" {
		t.Errorf("raftlog.env: bootstrap %v, admin address %q: want the example of a 3-node cluster with admin ports", o.cfg.Bootstrap, o.cfg.AdminAddr)
	}

	// systemd reads it without a complaint (an unknown key is a warning).
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit is not verified by systemd")
		return
	}
	self, err := os.Executable() // something executable for ExecStart
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "raftlog.service")
	if err := os.WriteFile(unit, []byte(strings.Replace(text, "ExecStart=/usr/local/bin/raftlog", "ExecStart="+self, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// dockerIgnored returns a function that reports whether the Dockerfile's
// ignore file leaves a path (slash-separated, from the context root) out
// of the build context: a pattern matches the path or a directory above
// it; * and ? stay within a path element, **/ spans any number.
func dockerIgnored(t *testing.T) func(rel string) bool {
	t.Helper()
	var res []*regexp.Regexp
	for _, l := range strings.Split(repoFile(t, "packaging/Dockerfile.dockerignore"), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf("Dockerfile.dockerignore: exceptions (%s) are new to this test: teach it", l)
		}
		var re strings.Builder
		re.WriteString("^")
		p := strings.TrimPrefix(l, "/")
		for p != "" {
			switch {
			case strings.HasPrefix(p, "**/"):
				re.WriteString("(.*/)?")
				p = p[3:]
			case p[0] == '*':
				re.WriteString("[^/]*")
				p = p[1:]
			case p[0] == '?':
				re.WriteString("[^/]")
				p = p[1:]
			default:
				re.WriteString(regexp.QuoteMeta(p[:1]))
				p = p[1:]
			}
		}
		re.WriteString("(/.*)?$")
		res = append(res, regexp.MustCompile(re.String()))
	}
	return func(rel string) bool {
		for _, re := range res {
			if re.MatchString(rel) {
				return true
			}
		}
		return false
	}
}

// The Dockerfile's build stage builds a static binary from the build
// context (the repository without what Dockerfile.dockerignore leaves
// out, .git among it), and its build arguments name the version and
// commit that the binary reports. The test runs the stage's go build
// command in a copy of the context; the base images are not pulled.
func TestDockerBuildStage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run the build command with")
	}
	d := readDockerfile(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ignored := dockerIgnored(t)
	if !ignored(".git") || !ignored(".git/HEAD") || !ignored("cmd/node/node.test") || ignored("go.mod") {
		t.Fatal("Dockerfile.dockerignore leaves .git or test binaries in the build context, or go.mod out")
	}
	ctxDir := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(ctxDir, 0o755); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		if ignored(filepath.ToSlash(rel)) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctxDir, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stage writes to /out; here to a temporary directory.
	script := strings.ReplaceAll(d.buildCommand(t), "/out/", out+"/")
	cmd := exec.Command(sh, "-c", script)
	cmd.Dir = ctxDir
	cmd.Env = append(cleanEnv(), "VERSION=v9.8.7", "COMMIT=0123456789ab")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build: %v\n%s\n%s", err, script, b)
	}
	bin := filepath.Join(out, "raftlog")
	b, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if text := string(b); !strings.Contains(text, "version:  v9.8.7\n") || !strings.Contains(text, "commit:   0123456789ab\n") {
		t.Errorf("version of the image's binary:\n%s", text)
	}
	if _, _, settings := goVersionM(t, bin); settings["CGO_ENABLED"] != "0" {
		t.Errorf("the image's binary was built with CGO_ENABLED=%s, want 0: the runtime image has no C library", settings["CGO_ENABLED"])
	}
	if fi, err := os.Stat(filepath.Join(out, "data")); err != nil || !fi.IsDir() {
		t.Errorf("the build stage made no data directory for the volume: %v", err)
	}
}
