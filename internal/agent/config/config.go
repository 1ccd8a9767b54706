// Package config loads config.yaml strictly: any bad key or value is a *config.Error naming key and
// file (exit 78), so a typo never leaves a default in force. The Python installer's file loads.
package config

import (
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/window"
)

// DefaultPath is where the package and the installer put the config.
const DefaultPath = "/etc/monky-deployd/config.yaml"

// EnvVar names the environment variable the command reads for --config's default.
const EnvVar = "MONKY_DEPLOYD_CONFIG"

// Transports.
const (
	TransportSDK    = "sdk"
	TransportProxy  = "proxy"
	TransportSystem = "system"
)

// volumes_on_absent values.
const (
	VolumesKeep  = "keep"
	VolumesPurge = "purge"
)

// Config is the agent's configuration after defaults, derivations and validation.
type Config struct {
	// Path is the file the config was loaded from (the file argument of Parse).
	Path string `yaml:"-"`

	EnvID     string `yaml:"env_id"`
	Site      string `yaml:"site"`
	Transport string `yaml:"transport"`
	// Identity is the ziti host identity file (default derived from EnvID).
	Identity string  `yaml:"identity"`
	Tenancy  Tenancy `yaml:"tenancy"`
	Bao      Bao     `yaml:"bao"`

	IntervalS  int  `yaml:"interval_s"`
	LaptopMode bool `yaml:"laptop_mode"`
	// Prod is as written when the file sets it, else derived (see IsProd); never nil after Parse.
	Prod          *bool  `yaml:"prod"`
	StateDir      string `yaml:"state_dir"`
	BootstrapFile string `yaml:"bootstrap_file"`
	Disk          Disk   `yaml:"disk"`

	HealthyTimeoutS int `yaml:"healthy_timeout_s"`
	// AutoRevert: a failed apply brings back the previous release (a bundle's auto_revert wins).
	AutoRevert      bool   `yaml:"auto_revert"`
	VolumesOnAbsent string `yaml:"volumes_on_absent"`
	ComposeProject  string `yaml:"compose_project"`
	DockerBin       string `yaml:"docker_bin"`
	// RegistryHost is the registry of a `username:password` pull credential.
	RegistryHost string `yaml:"registry_host"`
	// ContainerdRoot: docker 29 keeps layers in containerd's store, often on another disk (env-dev-08).
	ContainerdRoot string `yaml:"containerd_root"`
	// LogLevel is upper-cased: DEBUG, INFO, WARN, WARNING or ERROR.
	LogLevel string `yaml:"log_level"`
	// TextfileDir is node_exporter's textfile directory; metrics are written only if it exists.
	TextfileDir string `yaml:"textfile_dir"`

	// IdentityRenewBelowS: the agent renews the identity's certificate when less is left; 0 turns
	// renewal off (the warnings stay).
	IdentityRenewBelowS int64 `yaml:"identity_renew_below_s"`
	// AgentUser is the account ticks run as (the unit's User=): a tick started as root finding
	// no state_dir, or root's own, continues as it and never creates files as root.
	AgentUser string `yaml:"agent_user"`
	// InterceptRange is the tunneller's intercept (DNS) range, ziti-edge-tunnel's
	// --dns-ip-range: the agent's plain-HTTP calls under `transport: system` go there, so no
	// bundle network may take a subnet in it. InterceptPrefix is it parsed.
	InterceptRange  string       `yaml:"intercept_range"`
	InterceptPrefix netip.Prefix `yaml:"-"`
	// Drift correction and apply windows (issue 22).
	// DriftCorrection: a converged tick brings back a release whose containers were stopped,
	// removed or replaced by hand (a bundle's agent.drift_correction wins).
	DriftCorrection bool `yaml:"drift_correction"`
	// ApplyWindows: outside every window, a change to a running release waits; empty: any time.
	ApplyWindows   []string `yaml:"apply_windows"`
	ApplyWindowsTZ string   `yaml:"apply_windows_tz"`
	// Windows is ApplyWindows in ApplyWindowsTZ, parsed by Parse.
	Windows *window.Schedule `yaml:"-"`

	agentUserSet bool
}

// DefaultAgentUser is the account the package creates and its units run as.
const DefaultAgentUser = "monky-deployd"

// DefaultInterceptRange is ziti-edge-tunnel's default --dns-ip-range.
const DefaultInterceptRange = "100.64.0.0/10"

// Tenancy is how the agent reaches tenancy's agent entrypoint.
type Tenancy struct {
	// Service is the ziti service the sdk transport dials.
	Service string `yaml:"service"`
	// Host and Port are the intercept address; Port is the INTERCEPT port 443, not 8081 (seed 0.1.5).
	Host   string `yaml:"host"`
	Port   int    `yaml:"port"`
	Scheme string `yaml:"scheme"`
	// BaseURL is the installer's alias; after Parse, Scheme, Host and Port hold its parts.
	BaseURL   string `yaml:"base_url"`
	ProxyAddr string `yaml:"proxy_addr"`
	TimeoutS  int    `yaml:"timeout_s"`
}

// Bao is how the agent reaches OpenBao.
type Bao struct {
	Service string `yaml:"service"`
	// Addr is the OpenBao URL (an intercept name inside the mesh); see BaoURL.
	Addr      string `yaml:"addr"`
	AuthMount string `yaml:"auth_mount"`
	Role      string `yaml:"role"`
	KVMount   string `yaml:"kv_mount"`
	// CAFile is used when it exists, else the system roots; verification is never off.
	CAFile    string `yaml:"ca_file"`
	ProxyAddr string `yaml:"proxy_addr"`
	// RenewBelowS: a lease token whose TTL falls under this is renewed or re-leased.
	RenewBelowS int `yaml:"renew_below_s"`
	TimeoutS    int `yaml:"timeout_s"`
}

// Disk: required = need × Factor + HeadroomBytes, or HeadroomBytes for an undeclared size.
type Disk struct {
	Factor        float64 `yaml:"factor"`
	HeadroomBytes int64   `yaml:"headroom_bytes"`
}

// defaults returns the documented defaults; the env_id-derived ones are filled after decoding.
func defaults() Config {
	return Config{
		Transport: TransportSDK,
		Tenancy: Tenancy{
			Service:   "monky.tenancy.deploy",
			Port:      443,
			Scheme:    "http",
			ProxyAddr: "127.0.0.1:18443",
			TimeoutS:  30,
		},
		Bao: Bao{
			Service:     "openbao",
			Addr:        "https://bao.cbs.tikali.net:8200",
			AuthMount:   "jwt-tenancy",
			Role:        "see-env",
			KVMount:     "monky",
			CAFile:      "/etc/monky-deployd/openbao-ca.pem",
			ProxyAddr:   "127.0.0.1:18200",
			RenewBelowS: 3600,
			TimeoutS:    30,
		},
		IntervalS:           60,
		StateDir:            "/var/lib/monky-deployd",
		BootstrapFile:       "/etc/monky-deployd/bootstrap.jwt",
		Disk:                Disk{Factor: 1.5, HeadroomBytes: 2 << 30},
		HealthyTimeoutS:     300,
		AutoRevert:          true,
		VolumesOnAbsent:     VolumesKeep,
		DockerBin:           "docker",
		RegistryHost:        "harbor.tikali.net",
		ContainerdRoot:      "/var/lib/containerd",
		LogLevel:            "INFO",
		TextfileDir:         DefaultTextfileDir,
		IdentityRenewBelowS: DefaultIdentityRenewBelowS,
		AgentUser:           DefaultAgentUser,
		InterceptRange:      DefaultInterceptRange,
		DriftCorrection:     true,
	}
}

// AgentUserSet reports whether the file named agent_user (else the default stands, and a box
// without that account has none: root is then the agent's user).
func (c *Config) AgentUserSet() bool { return c.agentUserSet }

// DefaultIdentityRenewBelowS is 30 days: the controller signs for a year, fleetctl calls a box
// EXPIRING at 21 days, so a failing renewal has nine days of retries before anyone is paged.
const DefaultIdentityRenewBelowS = 30 * 24 * 3600

// MaxIdentityRenewBelowS (10 years) only keeps the window a duration; any longer window renews
// at every chance, as a window longer than the certificate's life does.
const MaxIdentityRenewBelowS = 10 * 365 * 24 * 3600

// IdentityRenewBelow is identity_renew_below_s as a duration; 0 when renewal is off.
func (c *Config) IdentityRenewBelow() time.Duration {
	return time.Duration(c.IdentityRenewBelowS) * time.Second
}

// DefaultTextfileDir is where Debian's prometheus-node-exporter reads textfiles from.
const DefaultTextfileDir = "/var/lib/prometheus/node-exporter"

// TextfileName is the agent's file in TextfileDir; node_exporter reads only files named *.prom.
const TextfileName = "monky_deployd.prom"

// TextfilePath is <textfile_dir>/monky_deployd.prom.
func (c *Config) TextfilePath() string { return filepath.Join(c.TextfileDir, TextfileName) }

// DefaultIdentity is the identity path the installer uses for envID.
func DefaultIdentity(envID string) string {
	return "/opt/openziti/etc/identities/monky-host." + envID + ".json"
}

// TenancyURL is the base URL of tenancy's agent entrypoint: scheme://host:port.
func (c *Config) TenancyURL() string {
	return c.Tenancy.Scheme + "://" + net.JoinHostPort(c.Tenancy.Host, strconv.Itoa(c.Tenancy.Port))
}

// BaoURL is OpenBao's base URL, scheme://host:port with the port made explicit.
func (c *Config) BaoURL() string {
	scheme, host, port, err := splitURL(c.Bao.Addr)
	if err != nil {
		return c.Bao.Addr // only for a Config that did not come from Parse
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// BaoEndpoint is BaoURL's (host, port), mapped by proxy and dialled by system transport.
func (c *Config) BaoEndpoint() (scheme, host string, port int) {
	scheme, host, port, _ = splitURL(c.Bao.Addr)
	return scheme, host, port
}

// DockerConfigDir is <state_dir>/docker, never $HOME: a human's login is not the agent's (0.1.7).
func (c *Config) DockerConfigDir() string { return filepath.Join(c.StateDir, "docker") }

// StatePath is <state_dir>/state.json.
func (c *Config) StatePath() string { return filepath.Join(c.StateDir, "state.json") }

// TokenPath is <state_dir>/bao.token.
func (c *Config) TokenPath() string { return filepath.Join(c.StateDir, "bao.token") }

// ZitiSessionPath is <state_dir>/ziti-session.json: the sdk transport's controller session,
// kept between ticks (issue 24).
func (c *Config) ZitiSessionPath() string { return filepath.Join(c.StateDir, "ziti-session.json") }

// StoragePaths are the filesystems a pull fills: docker's data-root and containerd's root.
func (c *Config) StoragePaths(dockerRoot string) []string {
	paths := []string{dockerRoot}
	if c.ContainerdRoot != "" && c.ContainerdRoot != dockerRoot {
		paths = append(paths, c.ContainerdRoot)
	}
	return paths
}

// LockPath is <state_dir>/lock.
func (c *Config) LockPath() string { return filepath.Join(c.StateDir, "lock") }

// EnvDir is <state_dir>/<env_id>, holding releases/ and the current symlink.
func (c *Config) EnvDir() string { return filepath.Join(c.StateDir, c.EnvID) }

// ReleasesDir is <state_dir>/<env_id>/releases.
func (c *Config) ReleasesDir() string { return filepath.Join(c.EnvDir(), "releases") }

// CurrentLink is <state_dir>/<env_id>/current, the symlink to the promoted release.
func (c *Config) CurrentLink() string { return filepath.Join(c.EnvDir(), "current") }

// IsProd reports whether this box runs production: an explicit `prod:` wins, else not prod when
// site is dev/qa or env_id is env-dev-*/env-qa-* (the installer writes the data centre as site).
func (c *Config) IsProd() bool {
	if c.Prod != nil {
		return *c.Prod
	}
	return deriveProd(c.Site, c.EnvID)
}

func deriveProd(site, envID string) bool {
	switch strings.ToLower(site) {
	case "dev", "qa":
		return false
	}
	return !strings.HasPrefix(envID, "env-dev-") && !strings.HasPrefix(envID, "env-qa-")
}

// SlogLevel maps LogLevel to a slog level (INFO for anything unrecognised, which Parse refuses).
func (c *Config) SlogLevel() slog.Level {
	switch strings.ToUpper(c.LogLevel) {
	case "DEBUG":
		return slog.LevelDebug
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERROR":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Interval is interval_s as a duration.
func (c *Config) Interval() time.Duration { return time.Duration(c.IntervalS) * time.Second }

// HealthyTimeout is healthy_timeout_s as a duration.
func (c *Config) HealthyTimeout() time.Duration {
	return time.Duration(c.HealthyTimeoutS) * time.Second
}

// Timeout is tenancy.timeout_s as a duration.
func (t Tenancy) Timeout() time.Duration { return time.Duration(t.TimeoutS) * time.Second }

// Timeout is bao.timeout_s as a duration.
func (b Bao) Timeout() time.Duration { return time.Duration(b.TimeoutS) * time.Second }

// RenewBelow is bao.renew_below_s as a duration.
func (b Bao) RenewBelow() time.Duration { return time.Duration(b.RenewBelowS) * time.Second }
