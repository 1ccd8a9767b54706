// Package devstack is a local control plane for monky-deployd and fleetctl — the tenancy agent
// API and admin API, the ziti management API and OpenBao, all on loopback — plus the boxes
// (agents) that run against it. `make demo` and the end-to-end tests (internal/test/e2e) are built on
// it, so the agent and fleetctl are proven together, not only each against its own fakes.
//
// One source of truth: tenancy's fake (tenancytest) holds what the agents really checked in
// and reported; every change is mirrored, before the agent gets its answer, into the admin API
// fleetctl reads (admintest) and into the mesh (zititest: a host that checks in is on the mesh
// unless a scenario took it off). Kits revealed through the admin API — `fleetctl onboard` —
// are real ES256 grants that supersede the earlier ones, and have the broker create or repair
// the host's identity.
//
// With Options.ZitiBin the ziti side is real instead (zitidev): a controller and edge router
// on loopback, the router hosting tenancy and OpenBao as services; fleetctl reads the
// controller, fleetctl onboard makes the identities there, and a box is on the mesh while its
// own `monky-deployd proxy` holds its enrolled identity (World.AddBox).
package devstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/baodev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/zitidev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// Options configure Start.
type Options struct {
	// Dir is where the stack keeps its files: fleetctl's config and secret files, the
	// controller's CA, OpenBao's logs. Required; it must exist.
	Dir string
	// BaoBin is an OpenBao server binary: when set the stack runs the REAL dev server
	// (baodev), configured as production; when empty, the in-process fake (baotest).
	BaoBin string
	// ZitiBin is a ziti binary (scripts/build-ziti.sh): when set the stack runs a REAL OpenZiti
	// controller and edge router (zitidev), the router hosting tenancy's agent API and OpenBao as
	// services, and fleetctl's config names its management API; boxes then reach the control
	// plane through the mesh (BoxOptions.Mesh). When empty, the in-process fake management API
	// (zititest), which the stack's mirror keeps in step with the check-ins.
	ZitiBin string
	// CheckinInterval is the checkin_interval_s tenancy hands out (1 min when zero; whole
	// seconds). fleetctl's default staleness is max(3×interval, 3 min).
	CheckinInterval time.Duration
	// GrantTTL is the lifetime of bootstrap and lease grants (1 h when zero).
	GrantTTL time.Duration
	// PackageVersion is what revealed kits install (version.Version when empty).
	PackageVersion string
	// Clock is tenancy's clock: check-in times, the admin API's `now`, grant times (time.Now
	// when nil). The real OpenBao checks grants against the wall clock: change it only with the
	// in-process one.
	Clock func() time.Time
	// Log receives one line per thing the stack does; nil discards.
	Log *slog.Logger
}

// Stack is a running control plane. Its methods are safe for concurrent use.
type Stack struct {
	// Tenancy is the agent API (POST /v1/agent/checkin…): the agents' tenancy.base_url.
	Tenancy *tenancytest.Server
	// Admin is the admin API fleetctl reads: tenancy.url.
	Admin *admintest.Server
	// Ziti is the fake controller's management API: ziti.url (TLS, CA in ZitiCAFile) unless
	// RealZiti is set, in which case fleetctl reads that one and Ziti is not started (nil).
	Ziti *zititest.Server
	// RealZiti is the real controller and router (Options.ZitiBin), nil with the fake.
	RealZiti *zitidev.Controller
	// Bao is OpenBao, real or fake.
	Bao Bao
	// Signer signs every grant; OpenBao's jwt-tenancy mount trusts its key.
	Signer *grant.Signer

	dir      string
	grantTTL time.Duration
	now      func() time.Time
	log      *slog.Logger

	adminToken   secret.Value
	zitiUser     string
	zitiPassword secret.Value

	syncMu sync.Mutex      // one mirror update at a time, each reading the latest view
	pinned map[string]bool // env → online, set by SetOnline: the scenario overrides the mesh
}

// Bao is the OpenBao the stack runs. Verify resolves an agent's bearer for tenancy.
type Bao interface {
	tenancytest.Verifier
	// Addr is the address agents use (bao.addr), http://127.0.0.1:PORT.
	Addr() string
	// Kind says which OpenBao this is, for people: "OpenBao dev server (pid N)" or "in-process fake".
	Kind() string
	// Put writes data as a new version of <env>/see/<path> in the KV v2 mount monky.
	Put(ctx context.Context, env, path string, data map[string]any) error
	// Pid is the server's process id, 0 when it runs in this process.
	Pid() int
	Close() error
}

type realBao struct{ s *baodev.Server }

func (b realBao) Verify(ctx context.Context, tok string) (string, string, error) {
	return b.s.Verify(ctx, tok)
}
func (b realBao) Addr() string { return b.s.Addr }
func (b realBao) Kind() string { return fmt.Sprintf("OpenBao dev server (pid %d)", b.s.Pid()) }
func (b realBao) Put(ctx context.Context, env, path string, data map[string]any) error {
	_, err := b.s.Put(ctx, env, path, data)
	return err
}
func (b realBao) Pid() int     { return b.s.Pid() }
func (b realBao) Close() error { return b.s.Stop() }

type fakeBao struct{ s *baotest.Server }

func (b fakeBao) Verify(ctx context.Context, tok string) (string, string, error) {
	return b.s.Verify(ctx, tok)
}
func (b fakeBao) Addr() string { return b.s.URL }
func (b fakeBao) Kind() string { return "in-process OpenBao fake" }
func (b fakeBao) Put(_ context.Context, env, path string, data map[string]any) error {
	b.s.PutData(env+"/see/"+path, data)
	return nil
}
func (b fakeBao) Pid() int     { return 0 }
func (b fakeBao) Close() error { b.s.Close(); return nil }

// The fleetctl files the stack writes in Dir.
const (
	FleetctlConfigFile = "fleetctl.yaml"
	zitiPasswordFile   = "ziti-password"
	tenancyTokenFile   = "tenancy-token"
	zitiCAFile         = "ziti-ca.pem"
	// The services the real controller's router hosts: tenancy's agent API (the name kits
	// carry) and OpenBao, dialled by identities with the production role attributes.
	TenancyService = "monky.tenancy.deploy"
	BaoService     = "openbao"
	// PidFile lists the pids of the servers the stack started as processes, one a line, so a
	// script's exit trap can stop them even if the stack itself was killed.
	PidFile = "pids"
)

// Start starts the control plane. Everything listens on 127.0.0.1 only. On error nothing is
// left running.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Dir == "" {
		return nil, errors.New("devstack: Options.Dir is required")
	}
	if opts.CheckinInterval == 0 {
		opts.CheckinInterval = time.Minute
	}
	if opts.CheckinInterval < time.Second {
		return nil, fmt.Errorf("devstack: check-in interval %s is under a second", opts.CheckinInterval)
	}
	if opts.GrantTTL == 0 {
		opts.GrantTTL = time.Hour
	}
	if opts.PackageVersion == "" {
		opts.PackageVersion = version.Version
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &Stack{
		dir: opts.Dir, grantTTL: opts.GrantTTL, now: opts.Clock, log: opts.Log, pinned: map[string]bool{},
		adminToken: secret.New("admin-" + randomHex(16)), zitiUser: "admin", zitiPassword: secret.New(randomHex(16)),
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()

	if s.Signer, err = grant.NewSigner("monky-tenancy-devstack"); err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	s.Signer.Clock = opts.Clock
	if opts.BaoBin != "" {
		baoDir := filepath.Join(opts.Dir, "openbao")
		if err := os.MkdirAll(baoDir, 0o700); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		srv, err := baodev.Start(ctx, baodev.Options{Bin: opts.BaoBin, Dir: baoDir, PublicKeyPEM: s.Signer.PublicKeyPEM()})
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		s.Bao = realBao{srv}
	} else {
		s.Bao = fakeBao{baotest.Start(baotest.Options{PublicKey: s.Signer.PublicKey(), Clock: opts.Clock})}
	}
	closers = append(closers, s.Bao.Close)
	if err := s.writePids(); err != nil {
		return nil, err
	}

	if opts.ZitiBin != "" {
		zdir := filepath.Join(opts.Dir, "ziti")
		if err := os.MkdirAll(zdir, 0o700); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		if s.RealZiti, err = zitidev.Start(ctx, zitidev.Options{Bin: opts.ZitiBin, Dir: zdir}); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		closers = append(closers, s.RealZiti.Stop)
		if err := s.AddPid(s.RealZiti.Pid()); err != nil {
			return nil, err
		}
		s.zitiUser, s.zitiPassword = s.RealZiti.User, s.RealZiti.Password
	} else {
		if s.Ziti, err = zititest.New(zititest.Options{Users: map[string]string{s.zitiUser: s.zitiPassword.Reveal()}}); err != nil {
			return nil, fmt.Errorf("devstack: ziti: %w", err)
		}
		closers = append(closers, func() error { s.Ziti.Close(); return nil })
	}

	s.Admin = admintest.New(admintest.Options{Token: s.adminToken.Reveal(), Now: opts.Clock, OnKit: s.brokerIdentity, Grant: s.kitGrant})
	closers = append(closers, func() error { s.Admin.Close(); return nil })
	// A kit carries production's addresses (fleetctl insists on an https OpenBao): they are what
	// the installer would write. The stack's boxes get their loopback addresses in NewBox.
	s.Admin.SetKitDefaults(admintest.KitDefaults{
		PackageVersion: opts.PackageVersion, TenancyService: "monky.tenancy.deploy", TenancyPort: 443,
		BaoAddr: "https://bao.cbs.tikali.net:8200", BaoAuthMount: baodev.AuthMount, BaoRole: baodev.Role,
		GrantTTL: opts.GrantTTL,
	})

	s.Tenancy = tenancytest.Start(tenancytest.Options{
		Verifier: s.Bao, Signer: s.Signer, Clock: opts.Clock, BaoAddr: s.Bao.Addr(), GrantTTL: opts.GrantTTL,
		CheckinIntervalS: int(opts.CheckinInterval / time.Second), OnUpdate: s.mirror,
	})
	closers = append(closers, func() error { s.Tenancy.Close(); return nil })

	if s.RealZiti != nil {
		// The router hosts the stack's tenancy and OpenBao (on loopback) as the production
		// services; only identities with the production attributes may dial them.
		for _, svc := range []struct{ name, url, role string }{
			{TenancyService, s.Tenancy.URL, ziti.AttrDeployAgent}, {BaoService, s.Bao.Addr(), ziti.AttrOpenBaoClient},
		} {
			u, err := url.Parse(svc.url)
			if err != nil {
				return nil, fmt.Errorf("devstack: %w", err)
			}
			if err := s.RealZiti.HostService(ctx, svc.name, u.Host, svc.role); err != nil {
				return nil, fmt.Errorf("devstack: %w", err)
			}
		}
	}
	if err := s.writeFleetctlConfig(); err != nil {
		return nil, err
	}
	s.log.Info("control plane up", "tenancy", s.Tenancy.URL, "admin", s.Admin.URL, "ziti", s.ZitiURL(),
		"openbao", s.Bao.Addr(), "openbao_kind", s.Bao.Kind())
	return s, nil
}

// Close stops everything the stack started and removes the files it wrote in Dir (the admin
// token and controller password among them). Boxes are the caller's to remove first.
func (s *Stack) Close() error {
	s.Tenancy.Close()
	s.Admin.Close()
	var errs []error
	if s.Ziti != nil {
		s.Ziti.Close()
	}
	if s.RealZiti != nil {
		errs = append(errs, s.RealZiti.Stop())
		_ = os.RemoveAll(filepath.Join(s.dir, "ziti"))
	}
	errs = append(errs, s.Bao.Close())
	err := errors.Join(errs...)
	for _, f := range []string{PidFile, FleetctlConfigFile, zitiPasswordFile, tenancyTokenFile, zitiCAFile} {
		_ = os.Remove(filepath.Join(s.dir, f))
	}
	if s.Bao.Pid() > 0 {
		_ = os.RemoveAll(filepath.Join(s.dir, "openbao"))
	}
	return err
}

// Dir is the stack's directory.
func (s *Stack) Dir() string { return s.dir }

// ZitiURL is the management API fleetctl reads: the real controller's or the fake's.
func (s *Stack) ZitiURL() string {
	if s.RealZiti != nil {
		return s.RealZiti.URL
	}
	return s.Ziti.URL
}

// ZitiKind says which controller this is, for people.
func (s *Stack) ZitiKind() string {
	if s.RealZiti != nil {
		return fmt.Sprintf("real OpenZiti controller and edge router (ziti edge quickstart, pid %d, router %s)", s.RealZiti.Pid(), s.RealZiti.RouterAddr)
	}
	return "in-process fake"
}

func (s *Stack) writePids() error {
	var b strings.Builder
	if pid := s.Bao.Pid(); pid > 0 {
		b.WriteString(strconv.Itoa(pid) + "\n")
	}
	if err := os.WriteFile(filepath.Join(s.dir, PidFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// AddPid records the pid of another server started for the stack (the registry) in PidFile.
func (s *Stack) AddPid(pid int) error {
	f, err := os.OpenFile(filepath.Join(s.dir, PidFile), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%d\n", pid)
	return err
}

// writeFleetctlConfig writes what `fleetctl --config DIR/fleetctl.yaml` needs: the URLs in the
// file, the password and admin token in 0600 files beside it (never in the config itself, and
// never in argv).
func (s *Stack) writeFleetctlConfig() error {
	var caPEM []byte
	if s.RealZiti != nil {
		var err error
		if caPEM, err = os.ReadFile(s.RealZiti.CAFile()); err != nil {
			return fmt.Errorf("devstack: ziti CA: %w", err)
		}
	} else {
		caPEM = s.Ziti.CAPEM()
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{zitiPasswordFile, []byte(s.zitiPassword.Reveal() + "\n"), 0o600},
		{tenancyTokenFile, []byte(s.adminToken.Reveal() + "\n"), 0o600},
		{zitiCAFile, caPEM, 0o644},
		{FleetctlConfigFile, []byte(fmt.Sprintf(`# fleetctl settings for the local dev stack (internal/dev/devstack); secrets are in the files beside it.
ziti:
  url: %s
  username: %s
  password_file: %s
  ca_file: %s
tenancy:
  url: %s
  token_file: %s
`, s.ZitiURL(), s.zitiUser, zitiPasswordFile, zitiCAFile, s.Admin.URL, tenancyTokenFile)), 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(s.dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
	}
	return nil
}

// FleetctlConfig is the path of the fleetctl config file for this stack.
func (s *Stack) FleetctlConfig() string { return filepath.Join(s.dir, FleetctlConfigFile) }

// Secrets are the values a process printing about the stack must mask (admin token, controller
// password).
func (s *Stack) Secrets() []string {
	return []string{s.adminToken.Reveal(), s.zitiPassword.Reveal()}
}

// AddBackend registers env at site in tenancy (no desired bundle yet), so that the admin API
// lists it (NEVER_CHECKED_IN) and a kit can be revealed for it.
func (s *Stack) AddBackend(env, site string) {
	s.Tenancy.AddEnv(env)
	s.Tenancy.SetSite(env, site)
}

// SetDesired makes files env's desired bundle and returns its sha.
func (s *Stack) SetDesired(env string, files map[string]string) string {
	sha := s.Tenancy.SetDesired(env, files)
	s.log.Info("desired bundle set", "env", env, "sha", sha[:12])
	return sha
}

// PutSecret writes data as a new version of <env>/see/<path> in OpenBao.
func (s *Stack) PutSecret(ctx context.Context, env, path string, data map[string]any) error {
	if err := s.Bao.Put(ctx, env, path, data); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// SetOnline pins env's host on (true) or off (false) the mesh, whatever its agent does: a
// scenario's "the host went down" or "the host stays up". It changes the identity at once.
func (s *Stack) SetOnline(env string, online bool) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.pinned[env] = online
	if s.Ziti != nil {
		s.Ziti.SetOnline(ziti.IdentityName(env), online)
	}
}

// mirror is tenancy's OnUpdate: it copies env's view into the admin API and, once the agent
// has checked in, puts its host on the mesh (a check-in travels over the mesh, so the host is
// on it) unless the scenario pinned it. It runs before the agent gets its answer.
func (s *Stack) mirror(env string) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	a, ok := s.Tenancy.AdminAgent(env)
	if !ok {
		return
	}
	s.Admin.PutAgent(a)
	if a.LastCheckinAt == nil || s.Ziti == nil {
		return // with the real controller, the mesh itself says who is on it
	}
	id, ok := s.Ziti.Identity(ziti.IdentityName(env))
	if !ok {
		return // no identity: fleetctl must say NO_IDENTITY, the mesh does not invent one
	}
	online, pinned := s.pinned[env]
	if !pinned {
		online = true
	}
	if id.Online == online && id.EnrollmentJWT == "" && id.Hostname == a.Hostname {
		return
	}
	// The tunneller enrolled (the one-time token is spent) and reports the host's name.
	id.Online, id.EnrollmentJWT, id.Hostname = online, "", a.Hostname
	if id.SDKApp == "" {
		id.SDKApp = "ziti-edge-tunnel"
	}
	s.Ziti.AddIdentity(id) // same ID: replaces
}

// kitGrant is the admin API's kit grant: tenancy signs a real bootstrap grant and supersedes
// every earlier grant of env (second-reveal semantics).
func (s *Stack) kitGrant(env string) (string, time.Time, error) {
	g := s.Tenancy.RevealKit(env)
	exp := s.now().Add(s.grantTTL)
	s.log.Info("kit revealed: earlier grants superseded", "env", env)
	return g, exp, nil
}

// brokerIdentity is what tenancy's broker does at a kit reveal: monky-host.<env> is created with
// both role attributes and a pending enrolment, or its missing attributes are added.
//
// With the real controller the broker does nothing: `fleetctl onboard` creates or repairs the
// identity on the controller itself (its ensure step), as it does when tenancy's broker is late.
func (s *Stack) brokerIdentity(env string) {
	if s.Ziti == nil {
		return
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	name := ziti.IdentityName(env)
	id, ok := s.Ziti.Identity(name)
	if !ok {
		s.Ziti.AddIdentity(zititest.Identity{Name: name, RoleAttributes: ziti.RequiredAttributes(),
			EnrollmentJWT: enrolmentToken(name), Online: s.pinned[env]})
		s.log.Info("broker: identity created", "identity", name)
		return
	}
	if missing := ziti.MissingAttributes(id.RoleAttributes); len(missing) > 0 {
		id.RoleAttributes = ziti.MergeAttributes(id.RoleAttributes)
		s.Ziti.AddIdentity(id)
		s.log.Info("broker: identity repaired", "identity", name, "added", strings.Join(missing, ","))
	}
}

// AddIdentity puts an identity on the controller directly (a scenario's orphan, or one made
// before the broker knew the attributes). Attributes are copied.
func (s *Stack) AddIdentity(name string, attrs []string, online bool) {
	if s.Ziti == nil {
		panic("devstack: AddIdentity is for the fake controller")
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.Ziti.AddIdentity(zititest.Identity{Name: name, RoleAttributes: slices.Clone(attrs), Online: online})
}

// enrolmentToken is shaped like a ziti enrolment JWT; nothing verifies it in the stack.
func enrolmentToken(name string) string {
	return "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJlbSI6Im90dCIsInN1YiI6IiJ9." + hex.EncodeToString([]byte(name))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
