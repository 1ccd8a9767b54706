package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
)

const (
	sourceZiti    = "ziti controller"
	sourceTenancy = "tenancy"
)

// zitiClient authenticates to the controller. Problems with local files (CA bundle, identity
// file) are configuration errors; anything the controller answers is a source error.
//
// Under certificate auth without ziti.url, the controller is the one the identity file names
// (ztAPI, or the first of ztAPIs): the management API lives under /edge/management/v1 on the
// same host and port. The URL so found is recorded in s, with its origin for -v.
func (g *globalOptions) zitiClient(ctx context.Context, s *config.Settings) (*ziti.Client, error) {
	if err := s.CheckZiti(); err != nil {
		return nil, err
	}
	cfg := ziti.Config{URL: s.ZitiURL, Concurrency: g.zitiConcurrency}
	if s.ZitiCAFile != "" {
		pem, err := g.w.ReadFile(s.ZitiCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: ziti.ca_file: %v", config.ErrInvalid, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ziti.ca_file %s: no PEM certificate in it", config.ErrInvalid, s.ZitiCAFile)
		}
		cfg.CAPool = pool
	}
	method := config.AuthPassword
	if s.ZitiIdentity != "" {
		id, err := ziti.LoadIdentityFile(s.ZitiIdentity)
		if err != nil {
			return nil, fmt.Errorf("%w: ziti.identity: %v", config.ErrInvalid, err)
		}
		cfg.Identity = id
		method = config.AuthCert
		if s.ZitiURL == "" {
			if id.ControllerURL == "" {
				return nil, fmt.Errorf("%w: ziti.url is not set, and the identity file %s names no controller (ztAPI, ztAPIs); set ziti.url, %s or --ziti-url",
					config.ErrInvalid, s.ZitiIdentity, config.EnvZitiURL)
			}
			s.ZitiURL = id.ControllerURL
			s.Origin["ziti.url"] = "identity file " + s.ZitiIdentity + " (" + id.ControllerField + ")"
			g.log.Debug("setting", "key", "ziti.url", "from", s.Origin["ziti.url"])
		}
		cfg.URL = s.ZitiURL
	} else {
		cfg.Username, cfg.Password = s.ZitiUsername, s.ZitiPassword
	}
	start := g.w.Now()
	c, err := ziti.Dial(ctx, cfg)
	if err != nil {
		return nil, &SourceError{Source: sourceZiti, Addr: cfg.URL, Err: err}
	}
	g.log.Debug("ziti: authenticated", "url", cfg.URL, "method", method, "took", g.w.Now().Sub(start).Round(time.Millisecond))
	return c, nil
}

func (g *globalOptions) adminClient(s *config.Settings) (*admin.Client, error) {
	if err := s.CheckTenancy(); err != nil {
		return nil, err
	}
	c, err := admin.New(s.TenancyURL, s.TenancyToken, &http.Client{Timeout: 60 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: tenancy.url: %v", config.ErrInvalid, err)
	}
	return c, nil
}

// sources is one complete read of both sources.
type sources struct {
	agents     *admin.Agents
	identities []ziti.Identity
}

// reader reads both sources, again and again for --watch and gate --wait. It keeps the
// controller session between readings and opens a new one when the controller drops it.
type reader struct {
	g  *globalOptions
	s  *config.Settings
	ac *admin.Client

	mu sync.Mutex
	zc *ziti.Client
}

func (g *globalOptions) newReader(s *config.Settings) (*reader, error) {
	if err := s.CheckZiti(); err != nil {
		return nil, err
	}
	ac, err := g.adminClient(s)
	if err != nil {
		return nil, err
	}
	return &reader{g: g, s: s, ac: ac}, nil
}

// zitiSession returns the session kept between readings, or opens one; fresh says it was
// opened by this call.
func (r *reader) zitiSession(ctx context.Context) (zc *ziti.Client, fresh bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.zc == nil {
		zc, err := r.g.zitiClient(ctx, r.s)
		if err != nil {
			return nil, false, err
		}
		r.zc = zc
		return zc, true, nil
	}
	return r.zc, false, nil
}

// dropSession forgets zc (when it is still the kept session): the next reading logs in again.
func (r *reader) dropSession(zc *ziti.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.zc == zc {
		r.zc = nil
	}
}

// identities lists the host identities on the kept session. The controller drops an API
// session that idles (between --watch rounds, between gate polls) or when it restarts; a
// kept session refused with 401 is replaced by a new login and the listing made once more, so
// the round still gets its answer. A fresh session refused is a source error, as is every
// other failure.
func (r *reader) identities(ctx context.Context, progress func(done, total int)) ([]ziti.Identity, error) {
	zc, fresh, err := r.zitiSession(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := zc.ListHostIdentities(ctx, progress)
	if errors.Is(err, ziti.ErrUnauthorized) {
		r.dropSession(zc)
		if !fresh {
			r.g.log.Debug("ziti: the controller dropped the session; authenticating again")
			if zc, _, err = r.zitiSession(ctx); err != nil {
				return nil, err
			}
			if ids, err = zc.ListHostIdentities(ctx, progress); errors.Is(err, ziti.ErrUnauthorized) {
				r.dropSession(zc)
			}
		}
	}
	if err != nil {
		return nil, &SourceError{Source: sourceZiti, Addr: r.s.ZitiURL, Err: err}
	}
	return ids, nil
}

// read fetches tenancy's agents and the controller's host identities at the same time. When
// one fails the other is abandoned and the failure is returned as a *SourceError naming it: a
// verdict is never made from one source alone.
func (r *reader) read(ctx context.Context, site string) (*sources, error) {
	g := r.g
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	prog := g.newProgress()
	defer prog.done()

	out := &sources{}
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		start := g.w.Now()
		ids, err := r.identities(ectx, prog.ziti)
		if err != nil {
			return err
		}
		out.identities = ids
		g.log.Debug("ziti: listed host identities", "count", len(ids), "took", g.w.Now().Sub(start).Round(time.Millisecond))
		return nil
	})
	eg.Go(func() error {
		start := g.w.Now()
		agents, err := r.ac.ListAgents(ectx, site, prog.tenancy)
		if err != nil {
			return &SourceError{Source: sourceTenancy, Addr: r.s.TenancyURL, Err: err}
		}
		out.agents = agents
		g.log.Debug("tenancy: listed agents", "count", len(agents.Agents), "pages", agents.Pages,
			"now", agents.Now.Format(time.RFC3339), "took", g.w.Now().Sub(start).Round(time.Millisecond))
		return nil
	})
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
