package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/fleettest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

var update = flag.Bool("update", false, "rewrite golden files (testdata) and the expected output inside the .txtar scripts")

// Secrets of the fakes. Distinctive, so that a test can grep every output for them.
const (
	zitiUser     = "ops-admin"
	zitiPassword = "zpw-Kq7Lm2Vx9Rt4"
	adminToken   = "adm-Tn5Pw8Zs3Yb6"
)

// TestMain registers fleetctl as a command of the scripts: testscript re-runs this test binary
// under that name, so the scripts drive the real Run with the real flag parsing and exit code.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"fleetctl":       func() { os.Exit(Main()) },
		"fleetctl-probe": probeMain,
	})
}

// probeMain runs `fleetctl ARGS…` as its own child and reports, as its last line on stderr,
// the child's wall time, CPU time (user + system) and peak RSS. The benchmark needs this middleman: a child spawned
// straight from the benchmark shares the benchmark's memory until it execs (vfork), and the
// kernel counts that — fakes holding 10,000 envs and all — as the child's peak RSS.
func probeMain() {
	cmd := exec.Command("fleetctl", os.Args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleetctl-probe:", err)
		os.Exit(125)
	}
	var maxrss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxrss = ru.Maxrss
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	fmt.Fprintf(os.Stderr, "fleetctl-probe: wall_ns=%d cpu_ns=%d maxrss_kb=%d\n", wall.Nanoseconds(), cpu.Nanoseconds(), maxrss)
	os.Exit(code)
}

type fakesKey struct{}

type fakes struct {
	z *zititest.Server
	a *admintest.Server

	mu      sync.Mutex
	churned int // identities ziti-churn created
	// markA and markZ are how many requests each fake had at the last fakes-mark.
	markA, markZ int
}

// startFakes starts both fakes with the credentials above; the caller closes them.
func startFakes() (*fakes, error) {
	z, err := zititest.New(zititest.Options{Users: map[string]string{zitiUser: zitiPassword}})
	if err != nil {
		return nil, err
	}
	a := admintest.New(admintest.Options{Token: adminToken})
	a.SetNow(fleettest.Now)
	return &fakes{z: z, a: a}, nil
}

func (f *fakes) close() {
	f.z.Close()
	f.a.Close()
}

// env is what fleetctl needs to reach the fakes, as the environment would give it.
func (f *fakes) env(work string) map[string]string {
	return map[string]string{
		"FLEETCTL_ZITI_URL":      f.z.URL,
		"FLEETCTL_ZITI_USERNAME": zitiUser,
		"FLEETCTL_ZITI_PASSWORD": zitiPassword,
		"FLEETCTL_ZITI_CA_FILE":  filepath.Join(work, "ziti-ca.pem"),
		"FLEETCTL_TENANCY_URL":   f.a.URL,
		"FLEETCTL_TENANCY_TOKEN": adminToken,
		"XDG_CONFIG_HOME":        filepath.Join(work, ".config"),
		"ZITI_PW":                zitiPassword,
		"ADMIN_TOKEN":            adminToken,
	}
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		UpdateScripts:       *update,
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			f, err := startFakes()
			if err != nil {
				return err
			}
			e.Defer(f.close)
			if err := os.WriteFile(filepath.Join(e.WorkDir, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
				return err
			}
			for k, v := range f.env(e.WorkDir) {
				e.Setenv(k, v)
			}
			e.Values[fakesKey{}] = f
			return nil
		},
		Cmds: scriptCmds,
	})
}

func fakesOf(ts *testscript.TestScript) *fakes { return ts.Value(fakesKey{}).(*fakes) }

var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	// exits N cmd args…: run cmd and require exit code N (testscript's `! exec` only knows
	// "not zero", and the exit codes are fleetctl's contract).
	"exits": func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 2 {
			ts.Fatalf("usage: exits CODE command args...")
		}
		want, err := strconv.Atoi(args[0])
		ts.Check(err)
		err = ts.Exec(args[1], args[2:]...)
		got := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			got = ee.ExitCode()
		case err != nil:
			ts.Fatalf("%v", err)
		}
		if got != want {
			ts.Fatalf("exit code %d, want %d", got, want)
		}
	},
	// fleet-demo: the demo fleet, with kit reveals creating identities like tenancy's broker.
	"fleet-demo": func(ts *testscript.TestScript, neg bool, args []string) {
		f := fakesOf(ts)
		fleettest.Seed(fleettest.Demo(fleettest.Now), f.z, f.a)
		fleettest.LinkKits(f.z, f.a)
	},
	// ziti-cert NAME DAYS: the identity NAME's cert authenticator expires DAYS days from tenancy's
	// now (negative: expired); "none" removes it.
	"ziti-cert": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: ziti-cert NAME DAYS|none")
		}
		var at time.Time
		if args[1] != "none" {
			days, err := strconv.Atoi(args[1])
			ts.Check(err)
			at = fleettest.Now.Add(time.Duration(days) * 24 * time.Hour)
		}
		if !fakesOf(ts).z.SetCertificate(args[0], at) {
			ts.Fatalf("no identity %s", args[0])
		}
	},
	// tenancy-cert ENV DAYS: ENV's last check-in said its certificate expires DAYS days from now.
	"tenancy-cert": func(ts *testscript.TestScript, neg bool, args []string) {
		days, err := strconv.Atoi(args[1])
		ts.Check(err)
		at := fleettest.Now.Add(time.Duration(days) * 24 * time.Hour).Format(time.RFC3339)
		fakesOf(ts).a.UpdateAgent(args[0], func(a *protocol.AdminAgent) { a.IdentityNotAfter = &at })
	},
	// ziti-fail OP STATUS|slow|malformed|ok [after=N]
	"ziti-fail": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: ziti-fail OP STATUS|slow|malformed|ok [after=N]")
		}
		fl := failure(ts, args[1:])
		fakesOf(ts).z.Fail(zititest.Op(args[0]), zititest.Failure{After: fl.after, Delay: fl.delay, Status: fl.status, Malformed: fl.malformed})
	},
	// tenancy-fail OP STATUS|slow|malformed|ok [after=N]
	"tenancy-fail": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: tenancy-fail OP STATUS|slow|malformed|ok [after=N]")
		}
		fl := failure(ts, args[1:])
		fakesOf(ts).a.Fail(admintest.Op(args[0]), admintest.Failure{After: fl.after, Delay: fl.delay, Status: fl.status, Malformed: fl.malformed})
	},
	// tenancy-backend ENV SITE: tenancy knows ENV (for a kit) without an agent record.
	"tenancy-backend": func(ts *testscript.TestScript, neg bool, args []string) {
		fakesOf(ts).a.AddBackend(args[0], args[1])
	},
	// tenancy-page-size N
	"tenancy-page-size": func(ts *testscript.TestScript, neg bool, args []string) {
		n, err := strconv.Atoi(args[0])
		ts.Check(err)
		fakesOf(ts).a.SetPageSize(n)
	},
	// fleet-config DIR: write DIR/config.yaml naming the fakes, with the password and token in
	// files beside it (relative paths), as an operator would keep them.
	"fleet-config": func(ts *testscript.TestScript, neg bool, args []string) {
		f := fakesOf(ts)
		dir := ts.MkAbs(args[0])
		ts.Check(os.MkdirAll(dir, 0o700))
		ts.Check(os.WriteFile(filepath.Join(dir, "ziti.pw"), []byte(zitiPassword+"\n"), 0o600))
		ts.Check(os.WriteFile(filepath.Join(dir, "tenancy.token"), []byte(adminToken+"\n"), 0o600))
		ts.Check(os.WriteFile(filepath.Join(dir, "ca.pem"), f.z.CAPEM(), 0o644))
		cfg := fmt.Sprintf("ziti:\n  url: %s\n  username: %s\n  password_file: ziti.pw\n  ca_file: ca.pem\ntenancy:\n  url: %s\n  token_file: tenancy.token\n",
			f.z.URL, zitiUser, f.a.URL)
		ts.Check(os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600))
	},
	// tenancy-no-broker: kit reveals no longer create the identity (fleetctl must).
	"tenancy-no-broker": func(ts *testscript.TestScript, neg bool, args []string) {
		fakesOf(ts).a.SetOnKit(nil)
	},
	// tenancy-on-poll N ENV VERSION: when the Nth listing from now starts (1 = the next one),
	// ENV checks in running VERSION at tenancy's now, its timer enabled.
	"tenancy-on-poll": func(ts *testscript.TestScript, neg bool, args []string) {
		n, err := strconv.Atoi(args[0])
		ts.Check(err)
		f := fakesOf(ts)
		n += f.a.Polls()
		env, ver := args[1], args[2]
		f.a.OnPoll(n, func() {
			now := f.a.Now().Format(time.RFC3339)
			f.a.UpdateAgent(env, func(a *protocol.AdminAgent) {
				a.AgentVersion, a.LastCheckinAt = ver, &now
				on := true
				a.Timer.Enabled, a.Timer.Active = &on, &on
			})
		})
	},
	// tenancy-kits: print the reveals made.
	"tenancy-kits": func(ts *testscript.TestScript, neg bool, args []string) {
		out := ts.Stdout() // even when there is nothing to print: stdout is this command's
		for _, k := range fakesOf(ts).a.Kits() {
			fmt.Fprintf(out, "%s site=%s transport=%s superseded=%d\n", k.EnvID, k.Request.Site, k.Request.Transport, len(k.Superseded))
		}
	},
	// ziti-page-limit N: the controller serves at most N identities a page (0: 500).
	"ziti-page-limit": func(ts *testscript.TestScript, neg bool, args []string) {
		n, err := strconv.ParseInt(args[0], 10, 64)
		ts.Check(err)
		fakesOf(ts).z.SetMaxLimit(n)
	},
	// ziti-churn always|once|off: when a page after the first is asked for, an identity that
	// sorts first (monky-host.aaa-churn-N) is created, shifting every later page — on every such
	// request, or on the first one only; off stops it and deletes what it created.
	"ziti-churn": func(ts *testscript.TestScript, neg bool, args []string) {
		f := fakesOf(ts)
		z := f.z
		if len(args) != 1 {
			ts.Fatalf("usage: ziti-churn always|once|off")
		}
		fired := false
		switch args[0] {
		case "off":
			z.OnList(nil)
			f.mu.Lock()
			for i := 1; i <= f.churned; i++ {
				z.RemoveIdentity(fmt.Sprintf("monky-host.aaa-churn-%d", i))
			}
			f.mu.Unlock()
		case "always", "once":
			once := args[0] == "once"
			z.OnList(func(offset int64) {
				f.mu.Lock()
				defer f.mu.Unlock()
				if offset == 0 || (once && fired) {
					return
				}
				fired = true
				f.churned++
				z.AddIdentity(zititest.Identity{Name: fmt.Sprintf("monky-host.aaa-churn-%d", f.churned)})
			})
		default:
			ts.Fatalf("usage: ziti-churn always|once|off")
		}
	},
	// ziti-add NAME [attrs=a,b] [online] [pending]
	"ziti-add": func(ts *testscript.TestScript, neg bool, args []string) {
		id := zititest.Identity{Name: args[0]}
		for _, a := range args[1:] {
			switch {
			case strings.HasPrefix(a, "attrs="):
				id.RoleAttributes = strings.Split(strings.TrimPrefix(a, "attrs="), ",")
			case a == "online":
				id.Online = true
			case a == "pending":
				id.EnrollmentJWT = "eyJhbGciOiJFUzI1NiJ9.eyJlbSI6Im90dCJ9.added-" + args[0]
			default:
				ts.Fatalf("ziti-add: unknown %q", a)
			}
		}
		fakesOf(ts).z.AddIdentity(id)
	},
	// ziti-identities [PREFIX]: print identities as name, attributes, enrolment state.
	"ziti-identities": func(ts *testscript.TestScript, neg bool, args []string) {
		out := ts.Stdout()
		for _, id := range fakesOf(ts).z.Identities() {
			if len(args) > 0 && !strings.HasPrefix(id.Name, args[0]) {
				continue
			}
			fmt.Fprintf(out, "%s attrs=%s type=%s admin=%v pending=%v\n", id.Name, strings.Join(id.RoleAttributes, ","),
				id.Type, id.IsAdmin, id.EnrollmentJWT != "")
		}
	},
	// tenancy-hold ENV BY SINCE UNTIL REASON…: ENV's last check-in carried a hold (SINCE and UNTIL
	// are offsets from the fakes' clock, -26h, 2h), and a desired release it has not applied.
	"tenancy-hold": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 5 {
			ts.Fatalf("usage: tenancy-hold ENV BY SINCE UNTIL REASON...")
		}
		h := &protocol.Hold{By: args[1], Since: offset(ts, args[2]), Until: offset(ts, args[3]), Reason: strings.Join(args[4:], " ")}
		if !fakesOf(ts).a.UpdateAgent(args[0], func(ag *protocol.AdminAgent) { ag.Hold, ag.DesiredSha = h, strings.Repeat("9f3e", 16) }) {
			ts.Fatalf("tenancy lists no %s", args[0])
		}
	},
	// tenancy-defer ENV UNTIL: ENV's desired release waits for its apply window until UNTIL (an
	// offset from the fakes' clock).
	"tenancy-defer": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: tenancy-defer ENV UNTIL")
		}
		u := offset(ts, args[1])
		if !fakesOf(ts).a.UpdateAgent(args[0], func(ag *protocol.AdminAgent) { ag.DeferredUntil, ag.DesiredSha = &u, strings.Repeat("9f3e", 16) }) {
			ts.Fatalf("tenancy lists no %s", args[0])
		}
	},
	// fakes-mark: from now on, fakes-writes and fakes-reads report only later requests.
	"fakes-mark": func(ts *testscript.TestScript, neg bool, args []string) {
		f := fakesOf(ts)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.markA, f.markZ = len(f.a.Requests()), len(f.z.Requests())
	},
	// fakes-writes: print every request since fakes-mark that could change something in either
	// fake — anything but a GET, and the controller's authentication — as SOURCE METHOD PATH.
	"fakes-writes": func(ts *testscript.TestScript, neg bool, args []string) {
		out := ts.Stdout() // even when there is nothing to print: stdout is this command's
		for _, r := range fakeRequests(ts) {
			if r.method != "GET" && !strings.HasSuffix(r.path, "/authenticate") {
				fmt.Fprintf(out, "%s %s %s\n", r.source, r.method, r.path)
			}
		}
	},
	// fakes-reads: print every GET since fakes-mark, as SOURCE GET PATH [FILTER].
	"fakes-reads": func(ts *testscript.TestScript, neg bool, args []string) {
		out := ts.Stdout()
		for _, r := range fakeRequests(ts) {
			if r.method == "GET" {
				fmt.Fprintln(out, strings.TrimSpace(fmt.Sprintf("%s GET %s %s", r.source, r.path, r.filter)))
			}
		}
	},
	// ziti-patches: print the PATCHes received.
	"ziti-patches": func(ts *testscript.TestScript, neg bool, args []string) {
		out := ts.Stdout()
		for _, p := range fakesOf(ts).z.Patches() {
			fmt.Fprintf(out, "%s attrs=%s\n", p.Name, strings.Join(p.RoleAttributes, ","))
		}
	},
	// ziti-identity-file PATH NAME: write a client identity file for certificate auth.
	"ziti-identity-file": func(ts *testscript.TestScript, neg bool, args []string) {
		b, err := fakesOf(ts).z.ClientIdentityFile(args[1])
		ts.Check(err)
		ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o600))
	},
	// filemode MODE FILE…: every FILE has permission bits MODE (octal).
	"filemode": func(ts *testscript.TestScript, neg bool, args []string) {
		want, err := strconv.ParseUint(args[0], 8, 32)
		ts.Check(err)
		for _, f := range args[1:] {
			fi, err := os.Stat(ts.MkAbs(f))
			ts.Check(err)
			if got := uint64(fi.Mode().Perm()); (got == want) == neg {
				ts.Fatalf("%s mode %04o, want %s%04o", f, got, map[bool]string{true: "not ", false: ""}[neg], want)
			}
		}
	},
	// ls DIR: the names in DIR, sorted.
	"ls": func(ts *testscript.TestScript, neg bool, args []string) {
		entries, err := os.ReadDir(ts.MkAbs(args[0]))
		ts.Check(err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		out := ts.Stdout()
		for _, n := range names {
			fmt.Fprintln(out, n)
		}
	},
}

// fakeRequest is a request either fake received.
type fakeRequest struct{ source, method, path, filter string }

// fakeRequests lists the requests both fakes received since the last fakes-mark.
func fakeRequests(ts *testscript.TestScript) []fakeRequest {
	f := fakesOf(ts)
	f.mu.Lock()
	ma, mz := f.markA, f.markZ
	f.mu.Unlock()
	var out []fakeRequest
	for _, r := range f.a.Requests()[ma:] {
		out = append(out, fakeRequest{"tenancy", r.Method, r.Path, ""})
	}
	for _, r := range f.z.Requests()[mz:] {
		out = append(out, fakeRequest{"ziti", r.Method, r.Path, r.Query.Get("filter")})
	}
	return out
}

type failureSpec struct {
	after     int
	delay     time.Duration
	status    int
	malformed bool
}

func failure(ts *testscript.TestScript, args []string) failureSpec {
	var f failureSpec
	switch args[0] {
	case "ok":
	case "slow":
		f.delay = time.Hour // outlasts any --timeout a script gives
	case "malformed":
		f.malformed = true
	default:
		n, err := strconv.Atoi(args[0])
		ts.Check(err)
		f.status = n
	}
	for _, a := range args[1:] {
		n, err := strconv.Atoi(strings.TrimPrefix(a, "after="))
		ts.Check(err)
		f.after = n
	}
	return f
}

// offset is fleettest.Now moved by a Go duration ("-26h", "2h"), as RFC 3339.
func offset(ts *testscript.TestScript, d string) string {
	v, err := time.ParseDuration(d)
	ts.Check(err)
	return fleettest.Now.Add(v).UTC().Format(time.RFC3339)
}
