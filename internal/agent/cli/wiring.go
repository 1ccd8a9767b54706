package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// transportOptions maps the config onto the transport's view of it.
func transportOptions(cfg *config.Config, log *slog.Logger) transport.Options {
	return transport.Options{
		Mode:             cfg.Transport,
		IdentityFile:     cfg.Identity,
		TenancyService:   cfg.Tenancy.Service,
		BaoService:       cfg.Bao.Service,
		TenancyHostPort:  hostPort(cfg.TenancyURL()),
		BaoHostPort:      hostPort(cfg.Bao.Addr),
		TenancyProxyAddr: cfg.Tenancy.ProxyAddr,
		BaoProxyAddr:     cfg.Bao.ProxyAddr,
		Logger:           log,
	}
}

// hostPort is the host:port a URL dials, with the scheme's default port filled in.
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Hostname() + ":443"
	}
	return u.Hostname() + ":80"
}

// wire builds a tick's outside world: transport, HTTP clients, docker CLI, systemd, disk meter.
func wire(cfg *config.Config, log *slog.Logger) (tick.Deps, func(), error) {
	opts := transportOptions(cfg, log)
	opts.SessionFile = cfg.ZitiSessionPath() // sdk: the controller session outlives the tick
	tr, err := transport.New(opts)
	if err != nil {
		return tick.Deps{}, nil, err
	}
	tenancyHTTP := &http.Client{
		Transport: tr.HTTPTransport(),
		Timeout:   time.Duration(cfg.Tenancy.TimeoutS) * time.Second,
	}
	run := runner.Exec{}
	host, _ := os.Hostname()
	baoClients := map[string]tick.Bao{}
	red := &secret.Redactor{}
	deps := tick.Deps{
		Redact:  red,
		Log:     log,
		Tenancy: tenancy.New(cfg.TenancyURL(), tenancyHTTP),
		NewBao: func(addr string) (tick.Bao, error) {
			if c, ok := baoClients[addr]; ok {
				return c, nil
			}
			c, err := newBaoClient(cfg, tr, addr)
			if err != nil {
				return nil, err
			}
			baoClients[addr] = c
			return c, nil
		},
		Docker: &compose.Docker{
			Bin:       cfg.DockerBin,
			ConfigDir: cfg.DockerConfigDir(),
			Project:   cfg.ComposeProject,
			Runner:    run,
			Now:       time.Now,
			Redact:    red,
			Environ:   os.Environ(),
		},
		Timer: func(ctx context.Context) *protocol.Timer {
			return systemd.TimerState(ctx, run, systemd.TimerUnit, time.Now())
		},
		Disk:     &diskspace.Meter{},
		Now:      time.Now,
		Hostname: host,
	}
	return deps, func() { _ = tr.Close() }, nil
}

// newBaoClient reaches addr through the transport, TLS against bao.ca_file named by addr's host.
func newBaoClient(cfg *config.Config, tr *transport.Transport, addr string) (*bao.Client, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("bao: address %q: %w", addr, err)
	}
	return bao.New(bao.Options{
		Addr:       addr,
		HTTPClient: &http.Client{Transport: tr.HTTPTransport()},
		CAFile:     cfg.Bao.CAFile,
		ServerName: u.Hostname(),
		Timeout:    time.Duration(cfg.Bao.TimeoutS) * time.Second,
	})
}
