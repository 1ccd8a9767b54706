// Package fleettest is a demo fleet — one env for every verdict, including the 0.1.8 upgrade
// that silently disabled env-dev-01's and env-dev-08's timers, and a silent box whose timer runs
// ticks that exit 78 — and the code to seed it into the fake controller and the fake tenancy.
// Tests, the dev stack and the README example use it.
package fleettest

import (
	"fmt"
	"hash/fnv"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Now is tenancy's clock in the demo fleet.
var Now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

const (
	shaA = "7a10c4e2b9d84f0e8f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"
	shaB = "9f3e21d07c6b4a5988776655443322110ffeeddccbbaa99887766554433221100"
)

// Fleet is a demo fleet: what tenancy and the controller hold.
type Fleet struct {
	Now        time.Time
	Agents     []protocol.AdminAgent
	Identities []zititest.Identity
}

func at(now time.Time, ago time.Duration) *string {
	s := now.Add(-ago).UTC().Format(time.RFC3339)
	return &s
}

func b(v bool) *bool     { return &v }
func i64(v int64) *int64 { return &v }

// agent is a healthy agent that last checked in `ago` before now.
func agent(now time.Time, env, site, version string, ago time.Duration) protocol.AdminAgent {
	tick := tickID(env)
	return protocol.AdminAgent{
		EnvID: env, Site: site, Identity: ziti.IdentityName(env), AgentVersion: version, Transport: "sdk",
		Hostname: env[len("env-"):], LastCheckinAt: at(now, ago), CheckinIntervalS: 60,
		DesiredSha: shaA, DesiredAt: at(now, 3*time.Hour), AppliedSha: shaA,
		LastResult: protocol.ResultHealthy, LastResultAt: at(now, ago),
		Timer:       &protocol.AdminTimer{Enabled: b(true), Active: b(true), NextElapse: at(now, ago-time.Minute), ObservedAt: at(now, ago)},
		TokenTTLSec: i64(80000), DiskFreeBytes: i64(93_000_000_000),
		LastAction: protocol.ActionNone, CheckinTickID: tick, ResultTickID: tick, LastExitCode: exit(0), ApplyTimeoutS: protocol.TickTimeoutS,
	}
}

func exit(c int) *int { return &c }

// tickID is a fixed tick id per env, as an agent's journal would end its lines with.
func tickID(env string) string {
	h := fnv.New64a()
	h.Write([]byte(env))
	return fmt.Sprintf("%012x", h.Sum64()&0xffffffffffff)
}

func identity(env string, online bool, sdk string) zititest.Identity {
	return zititest.Identity{
		Name: ziti.IdentityName(env), RoleAttributes: ziti.RequiredAttributes(), Online: online,
		Hostname: env[len("env-"):], SDKVersion: sdk, SDKApp: "ziti-edge-tunnel",
	}
}

// Demo returns the demo fleet at now: 14 rows, every verdict at least once.
func Demo(now time.Time) Fleet {
	f := Fleet{Now: now}
	add := func(a protocol.AdminAgent, id *zititest.Identity) {
		f.Agents = append(f.Agents, a)
		if id != nil {
			f.Identities = append(f.Identities, *id)
		}
	}
	withID := func(env string, online bool) *zititest.Identity { id := identity(env, online, "1.6.8"); return &id }

	// The 0.1.8 upgrade: prerm disabled the timer; the host stays on the mesh.
	silent := func(env string, ago time.Duration) protocol.AdminAgent {
		a := agent(now, env, "cbs", "0.1.8", ago)
		a.Timer = &protocol.AdminTimer{Enabled: b(false), Active: b(false), ObservedAt: at(now, ago)}
		return a
	}
	add(silent("env-dev-01", 47*time.Minute), withID("env-dev-01", true))
	add(agent(now, "env-dev-02", "cbs", "0.2.0", 20*time.Second), withID("env-dev-02", true))
	add(agent(now, "env-dev-03", "cbs", "0.2.0", 41*time.Second), withID("env-dev-03", true))
	// Silent with its timer enabled and active: its ticks run and exit 78 (a config edited by
	// hand) before they reach tenancy. Enabling the timer would not help.
	ticking := agent(now, "env-dev-04", "cbs", "0.2.0", 25*time.Minute)
	ticking.LastExitCode = exit(78)
	add(ticking, withID("env-dev-04", true))
	add(silent("env-dev-08", 29*time.Minute), withID("env-dev-08", true))

	refused := agent(now, "env-qa-01", "cbs", "0.2.0", 35*time.Second)
	refused.LastResult = protocol.ResultRefused
	refused.LastDetail = "DISK_INSUFFICIENT: image storage (/var/lib/containerd) has 812 MiB free, 4.1 GiB required"
	refused.LastExitCode = exit(1)
	refused.LastFailure = &protocol.Failure{Sha: shaA, Code: protocol.CodeDisk, Detail: refused.LastDetail,
		At: *at(now, 3*time.Minute), Attempts: 1}
	add(refused, withID("env-qa-01", true))

	// Registered before the broker added both attributes; one was added by hand, one forgotten.
	qa02 := withID("env-qa-02", true)
	qa02.RoleAttributes = []string{ziti.AttrDeployAgent, "site-cbs"}
	add(agent(now, "env-qa-02", "cbs", "0.2.0", 12*time.Second), qa02)

	drift := agent(now, "env-qa-03", "cbs", "0.2.0", 25*time.Second)
	drift.DesiredSha, drift.DesiredAt = shaB, at(now, 42*time.Minute)
	add(drift, withID("env-qa-03", true))

	add(agent(now, "env-stg-01", "osg", "0.2.0", 3*time.Hour+12*time.Minute), withID("env-stg-01", false))

	never := protocol.AdminAgent{EnvID: "env-stg-02", Site: "osg", Identity: ziti.IdentityName("env-stg-02"),
		CheckinIntervalS: 60, DesiredSha: shaA, DesiredAt: at(now, 2*time.Hour)}
	pending := identity("env-stg-02", false, "")
	pending.EnrollmentJWT = "eyJhbGciOiJFUzI1NiJ9.eyJlbSI6Im90dCJ9.pending"
	pending.Hostname, pending.SDKApp = "", ""
	add(never, &pending)

	add(agent(now, "env-stg-03", "osg", "0.2.0", 50*time.Second), nil)
	add(agent(now, "env-prod-01", "osg", "0.2.0", 18*time.Second), withID("env-prod-01", true))
	add(agent(now, "env-prod-02", "osg", "0.1.9", 33*time.Second), withID("env-prod-02", true))

	// A backend retired in tenancy whose identity was left on the controller.
	orphan := identity("env-old-07", false, "1.5.4")
	f.Identities = append(f.Identities, orphan)
	return f
}

// Seed loads f into both fakes and fixes the fake tenancy's clock at f.Now.
func Seed(f Fleet, z *zititest.Server, t *admintest.Server) {
	t.SetNow(f.Now)
	for _, a := range f.Agents {
		t.PutAgent(a)
	}
	for _, id := range f.Identities {
		z.AddIdentity(id)
	}
}

// Large returns a fleet of n healthy envs (for benchmarks): every agent checked in within the
// last minute, every identity online with both attributes.
func Large(now time.Time, n int) Fleet {
	f := Fleet{Now: now}
	for i := range n {
		env := fmt.Sprintf("env-%05d", i)
		a := agent(now, env, "cbs", "0.2.0", time.Duration(i%50)*time.Second)
		a.Hostname = fmt.Sprintf("host-%05d", i)
		f.Agents = append(f.Agents, a)
		id := identity(env, true, "1.6.8")
		id.Hostname = a.Hostname
		f.Identities = append(f.Identities, id)
	}
	return f
}

// LinkKits makes the fake tenancy behave like the real one at a kit reveal: the broker creates
// monky-host.<env> with both attributes (and a pending enrolment) when it does not exist.
func LinkKits(z *zititest.Server, t *admintest.Server) {
	t.SetOnKit(func(env string) {
		name := ziti.IdentityName(env)
		if _, ok := z.Identity(name); ok {
			return
		}
		z.AddIdentity(zititest.Identity{Name: name, RoleAttributes: ziti.RequiredAttributes(),
			EnrollmentJWT: "eyJhbGciOiJFUzI1NiJ9.eyJlbSI6Im90dCIsInN1YiI6IiJ9.broker-" + env})
	})
}
