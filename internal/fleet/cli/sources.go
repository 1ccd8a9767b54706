package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
)

const (
	sourceZiti    = "ziti controller"
	sourceTenancy = "tenancy"
)

// zitiSetup is everything reaching the controller needs, read before any request.
type zitiSetup struct {
	cfg          ziti.Config
	method       string
	fromIdentity bool // ziti.url came from the identity file
}

// zitiSetup checks the controller settings and reads the files they name; every problem is a
// configuration error found before any network. Without ziti.url, certificate auth uses the
// controller the identity file names, recorded in s with its origin.
func (g *globalOptions) zitiSetup(s *config.Settings) (*zitiSetup, error) {
	if err := s.CheckZiti(); err != nil {
		return nil, err
	}
	zs := &zitiSetup{cfg: ziti.Config{Concurrency: g.zitiConcurrency}, method: config.AuthPassword}
	if s.ZitiCAFile != "" {
		pem, err := g.deps.ReadFile(s.ZitiCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: ziti.ca_file: %v", config.ErrInvalid, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ziti.ca_file %s: no PEM certificate in it", config.ErrInvalid, s.ZitiCAFile)
		}
		zs.cfg.CAPool = pool
	}
	if s.ZitiIdentity != "" {
		id, err := ziti.LoadIdentityFile(s.ZitiIdentity)
		if err != nil {
			return nil, fmt.Errorf("%w: ziti.identity: %v", config.ErrInvalid, err)
		}
		zs.cfg.Identity = id
		zs.method = config.AuthCert
		if s.ZitiURL == "" {
			if id.ControllerURL == "" {
				return nil, fmt.Errorf("%w: ziti.url is not set, and the identity file %s names no controller (ztAPI, ztAPIs); set ziti.url, %s or --ziti-url",
					config.ErrInvalid, s.ZitiIdentity, config.EnvZitiURL)
			}
			s.ZitiURL = id.ControllerURL
			s.Origin["ziti.url"] = "identity file " + s.ZitiIdentity + " (" + id.ControllerField + ")"
			zs.fromIdentity = true
			g.log.Debug("setting", "key", "ziti.url", "from", s.Origin["ziti.url"])
		}
	} else {
		zs.cfg.Username, zs.cfg.Password = s.ZitiUsername, s.ZitiPassword
	}
	u, err := ziti.ParseManagementURL("ziti.url", s.ZitiURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (from %s)", config.ErrInvalid, err, s.Origin["ziti.url"])
	}
	s.ZitiURL, zs.cfg.URL = u, u
	return zs, nil
}

// dialZiti authenticates to the controller; any failure is a source error.
func (g *globalOptions) dialZiti(ctx context.Context, zs *zitiSetup) (*ziti.Client, error) {
	start := g.deps.Now()
	c, err := ziti.Dial(ctx, zs.cfg)
	if err != nil {
		if zs.fromIdentity && errors.Is(err, ziti.ErrNotFound) {
			// a controller may serve the management API elsewhere than the client API
			err = fmt.Errorf("%w (the management API is not at the identity file's controller address; set ziti.url)", err)
		}
		return nil, &SourceError{Source: sourceZiti, Addr: zs.cfg.URL, Err: err}
	}
	g.log.Debug("ziti: authenticated", "url", zs.cfg.URL, "method", zs.method, "took", g.deps.Now().Sub(start).Round(time.Millisecond))
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

type sources struct {
	agents     *admin.Agents
	identities []ziti.Identity
}

// reader reads both sources, again for --watch and gate --wait, keeping the controller session.
type reader struct {
	g  *globalOptions
	s  *config.Settings
	zs *zitiSetup
	ac *admin.Client

	mu sync.Mutex
	zc *ziti.Client
	// dialErr is this reading's failed login: the identities and the certificates listings
	// share one login, so a controller that refuses it is asked once per reading, not twice.
	dialErr error
}

// openReader reads the settings, lets check (optional) vet the command's own, and checks both
// sources' once: a configuration error ends the command before any network, rather than racing
// a source error or repeating every --watch round.
func (g *globalOptions) openReader(check func(*config.Settings) error) (*reader, error) {
	s, err := g.settings()
	if err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(s); err != nil {
			return nil, err
		}
	}
	zs, err := g.zitiSetup(s)
	if err != nil {
		return nil, err
	}
	ac, err := g.adminClient(s)
	if err != nil {
		return nil, err
	}
	return &reader{g: g, s: s, zs: zs, ac: ac}, nil
}

// zitiSession returns the kept session, or logs in (once per reading when the login fails).
func (r *reader) zitiSession(ctx context.Context) (*ziti.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.zc != nil {
		return r.zc, nil
	}
	if r.dialErr != nil {
		return nil, r.dialErr
	}
	zc, err := r.g.dialZiti(ctx, r.zs)
	if err != nil {
		r.dialErr = err
		return nil, err
	}
	r.zc = zc
	return zc, nil
}

// refuseSession forgets zc, which the controller refused before it ever answered, and makes
// err this reading's answer to whoever asks for a session next (the next reading logs in anew).
func (r *reader) refuseSession(zc *ziti.Client, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.zc == zc {
		r.zc = nil
	}
	r.dialErr = err
}

// dropSession forgets zc if it is still the kept one: the next call logs in again.
func (r *reader) dropSession(zc *ziti.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.zc == zc {
		r.zc = nil
	}
}

// withSession runs call on the kept session. The controller drops idle sessions and forgets them
// on restart: a 401 on a session that has answered before is a dropped session, replaced once; a
// 401 on one that never answered is this login's refusal, a source error. The session's own record
// decides, not which call logged in: the identities and certificates listings share one login, and
// either may be the one the refusal meets first.
func (r *reader) withSession(ctx context.Context, call func(*ziti.Client) error) error {
	zc, err := r.zitiSession(ctx)
	if err != nil {
		return err
	}
	err = call(zc)
	if errors.Is(err, ziti.ErrUnauthorized) && zc.Answered() {
		r.g.log.Debug("ziti: the controller dropped the session; authenticating again")
		r.dropSession(zc)
		if zc, err = r.zitiSession(ctx); err != nil {
			return err
		}
		err = call(zc)
	}
	if err == nil {
		return nil
	}
	serr := &SourceError{Source: sourceZiti, Addr: r.s.ZitiURL, Err: err}
	if errors.Is(err, ziti.ErrUnauthorized) {
		// Refused before it ever answered, or again after a new login: this reading's answer.
		// The other listing, asking for a session after this, gets it instead of a login.
		r.refuseSession(zc, serr)
	}
	return serr
}

// identities lists the host identities over the kept session.
func (r *reader) identities(ctx context.Context, progress func(done, total int)) (ids []ziti.Identity, err error) {
	err = r.withSession(ctx, func(zc *ziti.Client) (err error) {
		ids, err = zc.ListHostIdentities(ctx, progress)
		return err
	})
	return ids, err
}

// read fetches both sources at once; a failure of either is a *SourceError: a verdict is never
// made from one source alone.
func (r *reader) read(ctx context.Context, site, envGlob string) (*sources, error) {
	g := r.g
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	prog := g.newProgress()
	defer prog.done()

	// Both readings run to their end, a failure of one not cancelling the other: what each
	// source did is reported (the exporter's source_up), not only the first failure.
	out := &sources{}
	r.mu.Lock()
	r.dialErr = nil // a new reading logs in anew
	r.mu.Unlock()
	var zerr, terr error
	var wg sync.WaitGroup
	wg.Go(func() {
		start := g.deps.Now()
		ids, err := r.identities(ctx, prog.ziti)
		if err != nil {
			zerr = err
			return
		}
		out.identities = ids
		g.log.Debug("ziti: listed host identities", "count", len(ids), "took", g.deps.Now().Sub(start).Round(time.Millisecond))
	})
	var certs map[string]ziti.Certificate
	var cerr error
	wg.Go(func() {
		start := g.deps.Now()
		var err error
		if certs, err = r.certificates(ctx); err != nil {
			cerr = err
			return
		}
		g.log.Debug("ziti: listed certificates", "count", len(certs), "took", g.deps.Now().Sub(start).Round(time.Millisecond))
	})
	wg.Go(func() {
		start := g.deps.Now()
		agents, err := r.ac.ListAgents(ctx, site, prog.tenancy)
		if err != nil {
			terr = &SourceError{Source: sourceTenancy, Addr: r.s.TenancyURL, Err: err}
			return
		}
		out.agents = agents
		g.log.Debug("tenancy: listed agents", "count", len(agents.Agents), "pages", agents.Pages,
			"now", agents.Now.Format(time.RFC3339), "took", g.deps.Now().Sub(start).Round(time.Millisecond))
	})
	wg.Wait()
	if zerr == nil {
		zerr = cerr // one source: its first failure is the one reported
	}
	if err := errors.Join(zerr, terr); err != nil {
		return nil, err
	}
	ids, err := r.confirmMissing(ctx, out, envGlob)
	if err != nil {
		return nil, err
	}
	out.identities = ids
	attachCertificates(out.identities, certs)
	return out, nil
}

// certificates lists every identity's certificate over the kept session.
func (r *reader) certificates(ctx context.Context) (certs map[string]ziti.Certificate, err error) {
	err = r.withSession(ctx, func(zc *ziti.Client) (err error) {
		certs, err = zc.ListCertificates(ctx)
		return err
	})
	return certs, err
}

// attachCertificates gives each identity its certificate from the cert authenticators.
func attachCertificates(ids []ziti.Identity, certs map[string]ziti.Certificate) {
	for i := range ids {
		if c, ok := certs[ids[i].ID]; ok {
			ids[i].Cert = &c
		}
	}
}

// maxConfirm bounds the lookups by name per reading; beyond it the list is read again instead.
const maxConfirm = 50

// confirmMissing looks up by name each kept env whose identity the listing lacks: offset paging
// can drop a live identity without a trace, and NO_IDENTITY leads onboard to supersede a working
// box's grant. Over maxConfirm missing, the list is read again and either reading counts.
func (r *reader) confirmMissing(ctx context.Context, src *sources, envGlob string) ([]ziti.Identity, error) {
	have := make(map[string]bool, len(src.identities))
	for _, id := range src.identities {
		have[id.Name] = true
	}
	var missing []string
	for _, a := range src.agents.Agents {
		if !report.Keeps(envGlob, a.EnvID) {
			continue
		}
		name := report.IdentityOf(a) // the report's own names: what is confirmed is what Build judges
		if !have[name] {
			have[name] = true
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return src.identities, nil
	}
	out := src.identities
	if len(missing) > maxConfirm {
		r.g.log.Debug("ziti: identities missing from the listing; reading it again", "missing", len(missing))
		again, err := r.identities(ctx, nil)
		if err != nil {
			return nil, err
		}
		want := make(map[string]bool, len(missing))
		for _, n := range missing {
			want[n] = true
		}
		for _, id := range again {
			if want[id.Name] {
				out = append(out, id)
			}
		}
		return out, nil
	}
	zc, err := r.zitiSession(ctx)
	if err != nil {
		return nil, err
	}
	found := make([]*ziti.Identity, len(missing))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(max(r.g.zitiConcurrency, 1))
	for i, name := range missing {
		eg.Go(func() error {
			id, err := zc.FindIdentity(ectx, name)
			switch {
			case errors.Is(err, ziti.ErrNotFound):
				return nil
			case err != nil:
				return err
			}
			found[i] = id
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, &SourceError{Source: sourceZiti, Addr: r.s.ZitiURL, Err: err}
	}
	n := 0
	for _, id := range found {
		if id != nil {
			out = append(out, *id)
			n++
		}
	}
	r.g.log.Debug("ziti: looked up identities missing from the listing", "missing", len(missing), "found", n)
	return out, nil
}

// readerGC lets the garbage collector run a third as often while a command reads the whole
// fleet (status, gate): its heap is the pages it decodes, garbage once judged, and at 10,000 envs
// the default pacing spent ~14% of fleetctl's CPU collecting it, for ~17 MiB more peak (issue
// 24's status figure). GOGC, when the operator set it, wins. The exporter, which must stay small
// for as long as it runs, keeps the default. It returns the restore.
func (g *globalOptions) readerGC() func() {
	if g.deps.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(300)
	return func() { debug.SetGCPercent(old) }
}
