package ziti

import (
	"context"
	"fmt"
	"time"

	"github.com/openziti/edge-api/rest_management_api_client/authenticator"
	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// Certificate is an identity's client certificate as its cert authenticator holds it: the one
// the controller accepts, so its NotAfter is when the box falls off the mesh.
type Certificate struct {
	IdentityID      string
	NotAfter        time.Time
	Fingerprint     string
	IssuedByNetwork bool
	// Err is why certPem could not be read; NotAfter is then zero.
	Err error
}

// certFilter selects the cert authenticators (an identity has at most one).
const certFilter = `method = "cert"`

// ListCertificates reads every cert authenticator in pages (the first, then the rest
// concurrently), one call per page and not per identity, and returns them by identity id. A
// certificate that does not parse is kept with its Err: that env's horizon falls back to its
// agent's word. The list may change while paged; an authenticator missed that way only makes
// fleetctl use the check-in's date for that env, so it is not read twice.
func (c *Client) ListCertificates(ctx context.Context) (map[string]Certificate, error) {
	first, total, stride, err := c.certPage(ctx, 0, c.cfg.PageSize)
	if err != nil {
		return nil, err
	}
	if total > maxIdentities {
		return nil, fmt.Errorf("ziti: list authenticators: totalCount %d is beyond any fleet", total)
	}
	if n := int64(len(first)); n > 0 && n < stride && n < total {
		stride = n
	}
	pages := 1
	if total > int64(len(first)) && stride > 0 {
		pages = int((total + stride - 1) / stride)
	}
	results := make([][]Certificate, pages)
	results[0] = first
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Concurrency)
	for i := 1; i < pages; i++ {
		g.Go(func() error {
			items, _, _, err := c.certPage(gctx, int64(i)*stride, stride)
			results[i] = items
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string]Certificate, total)
	for _, page := range results {
		for _, cert := range page {
			out[cert.IdentityID] = cert
		}
	}
	return out, nil
}

// certPage returns one page of cert authenticators, totalCount and the limit applied.
func (c *Client) certPage(ctx context.Context, offset, limit int64) ([]Certificate, int64, int64, error) {
	filter := certFilter
	params := authenticator.NewListAuthenticatorsParamsWithContext(ctx).WithTimeout(c.cfg.Timeout).
		WithFilter(&filter).WithLimit(&limit).WithOffset(&offset)
	resp, err := c.mc.Authenticator.ListAuthenticators(params, c.session)
	if err != nil {
		return nil, 0, 0, wrap(fmt.Sprintf("list authenticators (offset %d)", offset), err)
	}
	p := resp.Payload
	if p == nil || p.Meta == nil || p.Meta.Pagination == nil || p.Meta.Pagination.TotalCount == nil {
		return nil, 0, 0, fmt.Errorf("ziti: list authenticators (offset %d): the answer has no meta.pagination.totalCount", offset)
	}
	applied := limit
	if l := p.Meta.Pagination.Limit; l != nil && *l > 0 && *l < limit {
		applied = *l
	}
	out := make([]Certificate, 0, len(p.Data))
	for i, a := range p.Data {
		switch {
		case a == nil || a.IdentityID == nil || *a.IdentityID == "":
			return nil, 0, 0, fmt.Errorf("ziti: list authenticators (offset %d): data[%d]: no identityId", offset, i)
		case a.Method != nil && *a.Method != "cert":
			continue // the filter asked for cert ones; a controller ignoring it sends others too
		}
		cert := Certificate{IdentityID: *a.IdentityID, Fingerprint: a.Fingerprint, IssuedByNetwork: a.IsIssuedByNetwork}
		if at, err := horizon.LeafNotAfter([]byte(a.CertPem)); err != nil {
			cert.Err = fmt.Errorf("authenticator of identity %s: certPem: %w", cert.IdentityID, err)
		} else {
			cert.NotAfter = at
		}
		out = append(out, cert)
	}
	return out, *p.Meta.Pagination.TotalCount, applied, nil
}
