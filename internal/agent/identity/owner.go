package identity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Where ziti-edge-tunnel keeps the identities it loads (its --identity-dir default), and its unit.
const (
	TunnellerDir  = "/opt/openziti/etc/identities"
	TunnellerUnit = "ziti-edge-tunnel.service"
)

// Who renews an identity's certificate.
const (
	// ByAgent: this process renews it (a tick of the sdk transport, or the proxy daemon).
	ByAgent = "agent"
	// ByProxy: the proxy daemon renews it; a tick of the proxy transport only reports.
	ByProxy = "proxy daemon"
	// ByTunneller: ziti-edge-tunnel loads the same identity and renews it; the agent must not,
	// or the tunneller would hold a certificate the controller no longer accepts.
	ByTunneller = "ziti-edge-tunnel"
	// Off: identity_renew_below_s is 0; only the warnings remain.
	Off = "off"
)

// Owner is who renews, and why, in words for the journal, status and doctor.
type Owner struct {
	By  string
	Why string
	// Holds: this process is the identity's only user (a tick of the sdk transport, or the proxy
	// daemon), so it settles a renewal a killed process left, even with renewal off.
	Holds bool
}

// Renews reports whether this process renews the certificate.
func (o Owner) Renews() bool { return o.By == ByAgent }

// Who decides who renews: the transport, the window, and whether ziti-edge-tunnel holds the file.
type Who struct {
	Transport string        // sdk, proxy or system
	Window    time.Duration // identity_renew_below_s; 0 is off
	// InProxy: this process is the proxy daemon (which renews for the proxy transport).
	InProxy bool
	// TunnellerDir is ziti-edge-tunnel's identity directory ("" means TunnellerDir).
	TunnellerDir string
	// TunnellerActive says whether ziti-edge-tunnel's unit is active; nil or an error: not known
	// to be, as on a box without systemd.
	TunnellerActive func(ctx context.Context) (bool, error)
}

// Decide says who renews the identity at path.
func (w Who) Decide(ctx context.Context, path string) Owner {
	if w.Transport == "system" {
		return Owner{By: ByTunneller, Why: "transport system: ziti-edge-tunnel holds the identity and renews it"}
	}
	dir := w.TunnellerDir
	if dir == "" {
		dir = TunnellerDir
	}
	if sameDir(filepath.Dir(path), dir) && w.TunnellerActive != nil {
		if active, err := w.TunnellerActive(ctx); err == nil && active {
			return Owner{By: ByTunneller, Why: fmt.Sprintf("%s is active and loads every identity in %s, this one too: it renews it", TunnellerUnit, dir)}
		}
	}
	if w.Transport == "proxy" && !w.InProxy {
		return Owner{By: ByProxy, Why: "transport proxy: monky-deployd-proxy.service holds the identity and renews it"}
	}
	if w.Window <= 0 {
		return Owner{By: Off, Why: "identity_renew_below_s is 0: renewal is off", Holds: true}
	}
	return Owner{By: ByAgent, Why: "transport " + w.Transport + ": the agent is the identity's only user", Holds: true}
}

// sameDir compares two directories as the file system sees them (a symlinked path counts).
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ai, err1 := os.Stat(a)
	bi, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ai, bi)
}
