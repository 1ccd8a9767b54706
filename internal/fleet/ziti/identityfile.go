package ziti

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ClientIdentity is an operator's ziti identity file (the JSON an enrolment writes), loaded for
// certificate authentication to the management API.
type ClientIdentity struct {
	Certificate tls.Certificate
	CA          *x509.CertPool // id.ca; nil when the file carries none
	// ControllerURL is the base of ztAPI (else ztAPIs[0]), "" when none; the management API is
	// looked for under it, which a controller need not serve (then set ziti.url).
	ControllerURL   string
	ControllerField string // "ztAPI" or "ztAPIs[i]"
}

// LoadIdentityFile reads a ziti identity file, relative references against its directory. Not
// the SDK's loader: it exits on a bad certificate and panics on a garbage key (see api-notes).
func LoadIdentityFile(path string) (*ClientIdentity, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ziti: identity file %s: %w", path, err)
	}
	id, err := ParseIdentity(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("ziti: identity file %s: %w", path, err)
	}
	return id, nil
}

// identityFile is the on-disk shape; unknown fields are ignored: newer SDKs keep adding them.
type identityFile struct {
	ZtAPI  string   `json:"ztAPI"`
	ZtAPIs []string `json:"ztAPIs"` // an HA cluster's controllers
	ID     *struct {
		Key  string `json:"key"`
		Cert string `json:"cert"`
		CA   string `json:"ca"`
	} `json:"id"`
}

// ParseIdentity parses an identity file's JSON; baseDir resolves file references, "" forbids them.
func ParseIdentity(data []byte, baseDir string) (*ClientIdentity, error) {
	var f identityFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a ziti identity (JSON): %w", err)
	}
	if f.ID == nil {
		return nil, errors.New(`field "id" is missing`)
	}
	certPEM, err := material("id.cert", f.ID.Cert, baseDir)
	if err != nil {
		return nil, err
	}
	keyPEM, err := material("id.key", f.ID.Key, baseDir)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("id.cert/id.key: %w", err)
	}
	out := &ClientIdentity{Certificate: pair}
	if f.ID.CA != "" {
		caPEM, err := material("id.ca", f.ID.CA, baseDir)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("id.ca: no PEM certificate in it")
		}
		out.CA = pool
	}
	field, api := "ztAPI", f.ZtAPI
	for i, a := range f.ZtAPIs {
		if api != "" {
			break
		}
		field, api = fmt.Sprintf("ztAPIs[%d]", i), a
	}
	if api != "" {
		base, err := parseClientAPI(field, api)
		if err != nil {
			return nil, err
		}
		out.ControllerURL, out.ControllerField = base, field
	}
	return out, nil
}

// material resolves one id.* value: "pem:…", "file://path" or a bare path, as the SDK does.
func material(field, v, baseDir string) ([]byte, error) {
	switch {
	case v == "":
		return nil, fmt.Errorf("%s: empty", field)
	case strings.HasPrefix(v, "pem:"):
		return []byte(strings.TrimPrefix(v, "pem:")), nil
	case strings.HasPrefix(v, "engine:"):
		return nil, fmt.Errorf("%s: hardware engines are not supported by fleetctl", field)
	}
	if baseDir == "" {
		return nil, fmt.Errorf("%s: file references are not allowed here", field)
	}
	p := strings.TrimPrefix(v, "file://")
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return b, nil
}
