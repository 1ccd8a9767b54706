package zititest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the controller's fingerprint
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-openapi/runtime/middleware"
	"github.com/go-openapi/strfmt"
	"github.com/openziti/edge-api/rest_management_api_server/operations"
	"github.com/openziti/edge-api/rest_management_api_server/operations/authenticator"
	"github.com/openziti/edge-api/rest_model"
)

// The management API's authenticators, as the controller lists them: every enrolled identity
// with a certificate has one "cert" authenticator carrying certPem and its fingerprint.

func registerAuthenticators(api *operations.ZitiEdgeManagementAPI) {
	api.AuthenticatorListAuthenticatorsHandler = authenticator.ListAuthenticatorsHandlerFunc(func(p authenticator.ListAuthenticatorsParams, pr any) middleware.Responder {
		return serverOf(p.HTTPRequest).authorized(pr, func(s *Server) middleware.Responder { return s.listAuthenticators(p) })
	})
}

// certPEM signs a client certificate for name with the fake's client CA, valid until notAfter.
func (s *Server) certPEM(name string, notAfter time.Time) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(s.now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notAfter.Add(-365 * 24 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.clientCA, &key.PublicKey, s.clientCK)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// SetCertificate gives name's identity a cert authenticator expiring at notAfter (zero: none).
func (s *Server) SetCertificate(name string, notAfter time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byID {
		if id.Name == name {
			id.CertNotAfter, id.CertPEM = notAfter, ""
			if !notAfter.IsZero() {
				id.CertPEM = s.certPEM(name, notAfter)
			}
			s.changedLocked()
			return true
		}
	}
	return false
}

func (s *Server) listAuthenticators(p authenticator.ListAuthenticatorsParams) middleware.Responder {
	offset := int64(0)
	if p.Offset != nil {
		offset = *p.Offset
	}
	if resp := s.behave(p.HTTPRequest, OpAuthenticators); resp != nil {
		return resp
	}
	var f authFilter
	if p.Filter != nil {
		var err error
		if f, err = parseAuthFilter(*p.Filter); err != nil {
			return errorResponder(http.StatusBadRequest, "INVALID_FILTER", err.Error())
		}
	}
	limit := int64(10)
	if p.Limit != nil {
		limit = *p.Limit
	}
	s.mu.Lock()
	capAt := s.maxLimit
	if capAt <= 0 {
		capAt = 500
	}
	limit = min(limit, capAt)
	if limit < 1 || offset < 0 {
		s.mu.Unlock()
		return errorResponder(http.StatusBadRequest, "INVALID_PAGINATION", "limit must be ≥ 1 and offset ≥ 0")
	}
	// The authenticators are derived once per change of the identities: a fake that hashes
	// 10,000 certificates for every page would measure itself, not its client.
	if s.auths == nil || s.authsVersion != s.version {
		s.auths = s.auths[:0]
		for _, id := range s.byID {
			if id.CertPEM != "" {
				s.auths = append(s.auths, toAuthenticator(*id))
			}
		}
		sort.Slice(s.auths, func(i, j int) bool { return *s.auths[i].ID < *s.auths[j].ID })
		s.authsVersion = s.version
	}
	raw := ""
	if p.Filter != nil {
		raw = *p.Filter
	}
	// Pages are kept until an identity changes, as the identities' are (pageKey).
	key := pageKey{op: OpAuthenticators, filter: raw, offset: offset, limit: limit, serve: limit, version: s.version}
	if b, ok := s.pages[key]; ok {
		s.mu.Unlock()
		return rawJSON(b)
	}
	var all []*rest_model.AuthenticatorDetail
	for _, a := range s.auths {
		if f.match(a) {
			all = append(all, a)
		}
	}
	s.mu.Unlock()
	total := int64(len(all))
	data := rest_model.AuthenticatorList{}
	for i := offset; i < total && i < offset+limit; i++ {
		data = append(data, all[i])
	}
	b, err := json.Marshal(&rest_model.ListAuthenticatorsEnvelope{
		Data: data,
		Meta: &rest_model.Meta{Pagination: &rest_model.Pagination{Limit: &limit, Offset: &offset, TotalCount: &total}},
	})
	if err != nil {
		return errorResponder(http.StatusInternalServerError, "UNHANDLED", err.Error())
	}
	s.keepPage(key, b)
	return rawJSON(b)
}

func toAuthenticator(id Identity) *rest_model.AuthenticatorDetail {
	aid, idID, method := "auth-"+id.ID, id.ID, "cert"
	now := strfmt.DateTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fp := ""
	if block, _ := pem.Decode([]byte(id.CertPEM)); block != nil {
		sum := sha1.Sum(block.Bytes) //nolint:gosec // the controller's fingerprint
		fp = hex.EncodeToString(sum[:])
	}
	return &rest_model.AuthenticatorDetail{
		BaseEntity:        rest_model.BaseEntity{ID: &aid, CreatedAt: &now, UpdatedAt: &now, Links: rest_model.Links{}},
		CertPem:           id.CertPEM,
		Fingerprint:       fp,
		Identity:          &rest_model.EntityRef{ID: id.ID, Name: id.Name, Entity: "identities", Links: rest_model.Links{}},
		IdentityID:        &idID,
		IsIssuedByNetwork: !id.CertNotNetwork,
		Method:            &method,
	}
}

// authFilter is the subset of the filter language fleetctl sends for authenticators:
// `field = "value"` joined by `and`, on method, identityId or id.
type authFilter []cond

func (f authFilter) match(a *rest_model.AuthenticatorDetail) bool {
	for _, c := range f {
		var v string
		switch c.field {
		case "method":
			v = *a.Method
		case "identityId", "identity":
			v = *a.IdentityID
		case "id":
			v = *a.ID
		}
		if v != c.value {
			return false
		}
	}
	return true
}

func parseAuthFilter(s string) (authFilter, error) {
	var out authFilter
	rest := strings.TrimSpace(s)
	for rest != "" {
		var c cond
		var err error
		c.field, rest = word(rest)
		switch c.field {
		case "method", "identityId", "identity", "id":
		default:
			return nil, fmt.Errorf("filter: unknown field %q", c.field)
		}
		if c.op, rest = word(rest); c.op != "=" {
			return nil, fmt.Errorf("filter: operator %q is not supported here", c.op)
		}
		if c.value, rest, err = str(rest); err != nil {
			return nil, err
		}
		out = append(out, c)
		if rest = strings.TrimSpace(rest); rest == "" {
			break
		}
		var conj string
		if conj, rest = word(rest); strings.ToLower(conj) != "and" {
			return nil, fmt.Errorf("filter: expected and, got %q", conj)
		}
	}
	return out, nil
}
